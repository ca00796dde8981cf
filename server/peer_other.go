//go:build !linux

package server

import (
	"net"
	"os"
)

// peerUID cannot ask the kernel here; the socket's mode (0600) and its private
// directory are the only guard.
func peerUID(net.Conn) (int, error) { return os.Getuid(), nil }
