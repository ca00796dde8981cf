//go:build linux

package sandbox

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// denyNetwork installs, on the calling OS thread (locked by the caller, with
// no_new_privs set), the seccomp filter of seccompFilter(network, false), which
// the program it then starts inherits. It closes what Landlock's TCP rules leave open —
// UDP, MPTCP, raw and netlink sockets — at the cost of a few instructions per
// syscall, where a network namespace costs milliseconds per start. It reports
// false, and installs nothing, on an architecture it does not know.
func denyNetwork(network bool) (bool, error) {
	prog := seccompFilter(network, false)
	if prog == nil {
		return false, nil
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if _, _, e := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog))); e != 0 {
		return false, fmt.Errorf("seccomp: %w", e)
	}
	runtime.KeepAlive(prog)
	return true, nil
}

// seccompFilter is a confined program's seccomp filter, nil on an architecture it
// does not know. A system call of another architecture's ABI (i386 or x32 on
// amd64) kills the process, so the filter cannot be sidestepped. Always:
// io_uring_setup(2) fails with ENOSYS (io_uring can create sockets without
// socket(2)), and the keyring calls (add_key, request_key, keyctl) with EPERM.
// Unless network, socket(2) succeeds only for AF_UNIX (EACCES).
//
// Without world and without network, connect(2) fails with EACCES, and socket(2)
// succeeds only for an AF_UNIX stream socket: a program may serve on a socket of
// its own (a go-plugin plugin does), and reach none. Landlock below ABI 9
// (resolve_unix) does not govern connecting to a path socket, so without this a
// program could connect to any whose path it knows — the user's session bus, an
// ssh-agent, a container engine — and an unconnected datagram socket could send
// to one with sendto(2) or sendmsg(2), whose address the filter cannot read.
// socketpair(2) names no path and passes. A world keeps connect(2): its mount
// namespace shows a program only the paths it was granted, and sockets there
// are ones the user granted.
//
// Always, what would hold memory outside its data segment, which is all that
// Limits.MemoryBytes (RLIMIT_DATA) counts, fails with EPERM: memfd_create(2), a
// shared anonymous mapping (mmap(2) with MAP_SHARED and MAP_ANONYMOUS), and System
// V IPC (shm*, msg*, sem*), whose objects an IPC namespace of its own does not
// cap (a world's takes as much as the kernel's defaults, gigabytes). Each held
// three times a 128 MiB limit before. (The shmem left: its TMPDIR, capped; a
// tmpfs a Write path names; /dev/zero is read-only to it.)
//
// Without world, System V IPC and POSIX message queues (mq_*) fail as well for
// another reason: no IPC namespace separates the program from the host and the
// other sources then, and their objects are found by key, id or name, not by a
// path Landlock could check (a world has an IPC namespace of its own). So does
// setpgid(2) into an existing group (a pgid other than 0): the program shares the
// host's session, and without a PID namespace of its own it could join the host's
// process group (setpgid(pid, 0), a group of its own, passes).
//
// With world (a program in a world of its own, see startWorld), what could change
// that world or reach past it fails with EPERM: mount and the new mount API,
// pivot_root, chroot, setns, unshare, clone(2) with a namespace flag (clone3(2),
// whose flags the filter cannot read, fails with ENOSYS, so that C libraries fall
// back to clone), ptrace, process_vm_readv/writev, perf_event_open, bpf,
// userfaultfd, and the kernel's module and kexec calls.
//
// The filter reads a call's arguments only for clone, socket, setpgid and mmap:
// for every other system call its answer depends on the number alone, so the
// kernel's action cache (Linux 5.11) allows the permitted ones (read, write, futex,
// epoll, ...) without running the filter, whatever the order of the comparisons.
// Keep it so. (mmap runs the filter, a few dozen instructions beside a call that
// maps memory.)
func seccompFilter(network, world bool) []unix.SockFilter {
	if Off("seccomp") {
		return nil
	}
	var arch uint32
	switch runtime.GOARCH {
	case "amd64":
		arch = unix.AUDIT_ARCH_X86_64
	case "arm64":
		arch = unix.AUDIT_ARCH_AARCH64
	default:
		return nil
	}
	const (
		offNR   = 0  // seccomp_data.nr
		offArch = 4  // seccomp_data.arch
		offArg0 = 16 // seccomp_data.args[0], its low 32 bits on little-endian machines
		offArg1 = 24 // seccomp_data.args[1], so too
		offArg3 = 40 // seccomp_data.args[3], so too
		x32Bit  = 0x40000000
		// sockTypeMask is socket(2)'s type without SOCK_NONBLOCK and SOCK_CLOEXEC.
		sockTypeMask = 0xf
		nsFlags      = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
			unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWTIME
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
		ld(offArch),
		jeq(arch, 1, 0),
		ret(unix.SECCOMP_RET_KILL_PROCESS),
		ld(offNR),
		{Code: unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K, K: x32Bit, Jt: 0, Jf: 1},
		ret(unix.SECCOMP_RET_KILL_PROCESS),
	}
	deny := func(nr uintptr, e unix.Errno) {
		prog = append(prog, jeq(uint32(nr), 0, 1), ret(errno(e)))
	}
	deny(unix.SYS_IO_URING_SETUP, unix.ENOSYS)
	for _, nr := range []uintptr{unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY, unix.SYS_KEYCTL} {
		deny(nr, unix.EPERM)
	}
	// Memory that is not its data segment: memfd_create, and System V IPC.
	for _, nr := range []uintptr{
		unix.SYS_MEMFD_CREATE,
		unix.SYS_SHMGET, unix.SYS_SHMAT, unix.SYS_SHMCTL,
		unix.SYS_MSGGET, unix.SYS_MSGSND, unix.SYS_MSGRCV, unix.SYS_MSGCTL,
		unix.SYS_SEMGET, unix.SYS_SEMOP, unix.SYS_SEMTIMEDOP, unix.SYS_SEMCTL,
	} {
		deny(nr, unix.EPERM)
	}
	// mmap: MAP_SHARED (or MAP_SHARED_VALIDATE) with MAP_ANONYMOUS in its fourth
	// argument.
	prog = append(prog,
		jeq(unix.SYS_MMAP, 0, 5), // past the check, the number still loaded
		ld(offArg3),
		unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K, K: unix.MAP_ANONYMOUS, Jt: 0, Jf: 2},
		unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K, K: unix.MAP_SHARED, Jt: 0, Jf: 1},
		ret(errno(unix.EPERM)),
		ret(unix.SECCOMP_RET_ALLOW),
	)
	if !world {
		for _, nr := range []uintptr{
			unix.SYS_MQ_OPEN, unix.SYS_MQ_UNLINK, unix.SYS_MQ_TIMEDSEND, unix.SYS_MQ_TIMEDRECEIVE,
			unix.SYS_MQ_NOTIFY, unix.SYS_MQ_GETSETATTR,
		} {
			deny(nr, unix.EPERM)
		}
		// setpgid: a pgid other than 0 in its second argument.
		prog = append(prog,
			jeq(unix.SYS_SETPGID, 0, 4), // past the check, the number still loaded
			ld(offArg1),
			jeq(0, 0, 1),
			ret(unix.SECCOMP_RET_ALLOW),
			ret(errno(unix.EPERM)),
		)
	}
	if world {
		deny(unix.SYS_CLONE3, unix.ENOSYS)
		for _, nr := range []uintptr{
			unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_CHROOT,
			unix.SYS_OPEN_TREE, unix.SYS_MOVE_MOUNT, unix.SYS_FSOPEN, unix.SYS_FSCONFIG,
			unix.SYS_FSMOUNT, unix.SYS_FSPICK, unix.SYS_MOUNT_SETATTR,
			unix.SYS_SETNS, unix.SYS_UNSHARE, unix.SYS_PTRACE,
			unix.SYS_PROCESS_VM_READV, unix.SYS_PROCESS_VM_WRITEV,
			unix.SYS_PERF_EVENT_OPEN, unix.SYS_BPF, unix.SYS_USERFAULTFD,
			unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE, unix.SYS_DELETE_MODULE,
			unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD,
		} {
			deny(nr, unix.EPERM)
		}
		// clone: a namespace flag in its first argument.
		prog = append(prog,
			jeq(unix.SYS_CLONE, 0, 4), // past the check, the number still loaded
			ld(offArg0),
			unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K, K: nsFlags, Jt: 0, Jf: 1},
			ret(errno(unix.EPERM)),
			ret(unix.SECCOMP_RET_ALLOW),
		)
	}
	if !network && !world {
		// No connect(2) at all: without the network the only sockets are AF_UNIX
		// ones, and a connect names a path (or abstract name) Landlock below
		// ABI 9 does not govern.
		deny(unix.SYS_CONNECT, unix.EACCES)
	}
	if !network {
		// socket: AF_UNIX only; without world, SOCK_STREAM only (an unconnected
		// datagram socket reaches a path with sendto/sendmsg, whose address the
		// filter cannot read).
		unixOK := []unix.SockFilter{ret(unix.SECCOMP_RET_ALLOW)}
		if !world {
			unixOK = []unix.SockFilter{
				ld(offArg1),
				{Code: unix.BPF_ALU | unix.BPF_AND | unix.BPF_K, K: sockTypeMask},
				jeq(unix.SOCK_STREAM, 0, 1),
				ret(unix.SECCOMP_RET_ALLOW),
			}
		}
		prog = append(prog,
			jeq(unix.SYS_SOCKET, 1, 0),
			ret(unix.SECCOMP_RET_ALLOW),
			ld(offArg0),
			jeq(unix.AF_UNIX, 0, uint8(len(unixOK))),
		)
		prog = append(append(prog, unixOK...), ret(errno(unix.EACCES)))
	}
	return append(prog, ret(unix.SECCOMP_RET_ALLOW))
}
