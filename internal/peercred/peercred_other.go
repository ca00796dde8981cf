//go:build !linux

package peercred

import (
	"errors"
	"net"
)

// ErrUnsupported is returned by Of where the kernel cannot be asked.
var ErrUnsupported = errors.New("peercred: peer credentials are not available on this system")

// Of cannot ask the kernel here.
func Of(net.Conn) (Peer, error) { return Peer{}, ErrUnsupported }
