package peercred

import (
	"errors"
	"net"

	"golang.org/x/sys/unix"
)

// Of returns the peer of a unix socket connection: its uid (LOCAL_PEERCRED) and
// pid (LOCAL_PEERPID).
func Of(c net.Conn) (Peer, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return Peer{}, errors.New("not a unix socket connection")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return Peer{}, err
	}
	var p Peer
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		var cred *unix.Xucred
		if cred, credErr = unix.GetsockoptXucred(int(fd), unix.SOL_LOCAL, unix.LOCAL_PEERCRED); credErr != nil {
			return
		}
		p.UID = int(cred.Uid)
		p.PID, credErr = unix.GetsockoptInt(int(fd), unix.SOL_LOCAL, unix.LOCAL_PEERPID)
	}); err != nil {
		return Peer{}, err
	}
	if credErr != nil {
		return Peer{}, credErr
	}
	return p, nil
}
