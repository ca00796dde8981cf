//go:build linux

package sandbox

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// denyNetwork installs, on the calling OS thread (locked by the caller, with
// no_new_privs set), a seccomp filter the program it then starts inherits: socket(2)
// succeeds only for AF_UNIX, and io_uring_setup(2) fails with ENOSYS (io_uring can
// create sockets without socket(2)). It closes what Landlock's TCP rules leave open —
// UDP, MPTCP, raw and netlink sockets — at the cost of a few instructions per
// syscall, where a network namespace costs milliseconds per start. A syscall of
// another architecture's ABI (i386 or x32 on amd64) kills the process, so the filter
// cannot be sidestepped. It reports false, and installs nothing, on an architecture
// it does not know.
func denyNetwork() (bool, error) {
	var arch uint32
	var sysSocket, sysIOUring uint32
	switch runtime.GOARCH {
	case "amd64":
		arch, sysSocket, sysIOUring = unix.AUDIT_ARCH_X86_64, unix.SYS_SOCKET, unix.SYS_IO_URING_SETUP
	case "arm64":
		arch, sysSocket, sysIOUring = unix.AUDIT_ARCH_AARCH64, unix.SYS_SOCKET, unix.SYS_IO_URING_SETUP
	default:
		return false, nil
	}
	const (
		offNR   = 0  // seccomp_data.nr
		offArch = 4  // seccomp_data.arch
		offArg0 = 16 // seccomp_data.args[0], its low 32 bits on little-endian machines
		x32Bit  = 0x40000000
	)
	ld := func(off uint32) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: off}
	}
	jeq := func(k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: k, Jt: jt, Jf: jf}
	}
	ret := func(k uint32) unix.SockFilter { return unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: k} }
	errno := func(e unix.Errno) uint32 { return unix.SECCOMP_RET_ERRNO | uint32(e)&unix.SECCOMP_RET_DATA }

	prog := []unix.SockFilter{
		/* 0 */ ld(offArch),
		/* 1 */ jeq(arch, 1, 0),
		/* 2 */ ret(unix.SECCOMP_RET_KILL_PROCESS),
		/* 3 */ ld(offNR),
		/* 4 */ {Code: unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K, K: x32Bit, Jt: 0, Jf: 1},
		/* 5 */ ret(unix.SECCOMP_RET_KILL_PROCESS),
		/* 6 */ jeq(sysIOUring, 0, 1),
		/* 7 */ ret(errno(unix.ENOSYS)),
		/* 8 */ jeq(sysSocket, 1, 0),
		/* 9 */ ret(unix.SECCOMP_RET_ALLOW),
		/* 10 */ ld(offArg0),
		/* 11 */ jeq(unix.AF_UNIX, 0, 1),
		/* 12 */ ret(unix.SECCOMP_RET_ALLOW),
		/* 13 */ ret(errno(unix.EACCES)),
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if _, _, e := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog))); e != 0 {
		return false, fmt.Errorf("seccomp: %w", e)
	}
	runtime.KeepAlive(prog)
	return true, nil
}
