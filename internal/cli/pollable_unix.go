//go:build unix

package cli

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// pollable returns a file on a duplicate of f's descriptor, in non-blocking mode,
// which the runtime's network poller reads, when f is a pipe or a socket (what MCP
// clients give their server as stdin) in blocking mode; restore puts f's
// descriptor back in blocking mode (the mode belongs to the open file, which the
// duplicate shares) and closes the duplicate. Otherwise it returns nil.
//
// Read in blocking mode, stdin holds a thread, and its processor, in read(2)
// between messages; the runtime's monitor has to take the processor back (after
// its polling delay) before anything else can run on it, such as the call the line
// just read, or the plugin's answer to another. Read through the poller, the
// thread epoll wakes for the client's line reads it and goes on with the call.
func pollable(f *os.File) (pf *os.File, restore func()) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, nil
	}
	var dup int
	err = errors.New("not a pipe or socket in blocking mode")
	if cerr := rc.Control(func(fd uintptr) {
		var st unix.Stat_t
		if unix.Fstat(int(fd), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO && st.Mode&unix.S_IFMT != unix.S_IFSOCK {
			return
		}
		if fl, ferr := unix.FcntlInt(fd, unix.F_GETFL, 0); ferr != nil || fl&unix.O_NONBLOCK != 0 {
			return // already non-blocking: os.Stdin is read through the poller
		}
		if dup, err = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0); err != nil {
			return
		}
		if err = unix.SetNonblock(dup, true); err != nil {
			unix.Close(dup)
		}
	}); cerr != nil || err != nil {
		return nil, nil
	}
	pf = os.NewFile(uintptr(dup), f.Name())
	return pf, func() {
		pf.Close()
		_ = rc.Control(func(fd uintptr) { _ = unix.SetNonblock(int(fd), false) })
	}
}
