//go:build !linux && !darwin

package peercred

import "net"

// Of cannot ask the kernel here.
func Of(net.Conn) (Peer, error) { return Peer{}, ErrUnsupported }
