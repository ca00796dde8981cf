package sandbox

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The raw start of a program in its world: one clone3 into new namespaces, then,
// in the child, the world built and every confinement applied by plain system
// calls before the execve. As os/exec's children, the child shares the host's
// memory, and the calling thread waits, until its execve or exit (CLONE_VM,
// CLONE_VFORK): nothing of the host's memory is copied. It runs the rest of
// forkWorld, which may neither allocate, nor grow its stack, nor take a lock (the
// runtime's fork hooks mark the stack so that a growth would crash), and never
// returns. Everything it needs is prepared in childArgs by the host beforehand.
//
// Why not os/exec: the world is built between the clone and the execve (mounts,
// pivot_root, a Landlock rule for the TMPDIR only the child's world has, the
// seccomp filter last), which syscall.SysProcAttr cannot express. os/exec could
// start such a program only through a launcher (the host's binary re-executed to
// build the world, then execve the program), one process start more per launch,
// which takes a confined launch past a bare go-plugin launch
// (BenchmarkLaunchAlternating in plugins). Running Go code in the child needs the
// runtime's fork hooks, linked from package syscall below, and a vfork system call
// that keeps its return address in a register: package syscall's
// rawVforkSyscall, unexported, copied in vfork_linux_*.s. Both must follow the Go
// release's own (syscall/exec_linux.go, syscall/asm_linux_*.s).

// rawVforkSyscall is in vfork_linux_*.s.
func rawVforkSyscall(trap, a1, a2, a3 uintptr) (r1, err uintptr)

//go:linkname runtime_BeforeFork syscall.runtime_BeforeFork
func runtime_BeforeFork()

//go:linkname runtime_AfterFork syscall.runtime_AfterFork
func runtime_AfterFork()

//go:linkname runtime_AfterForkInChild syscall.runtime_AfterForkInChild
func runtime_AfterForkInChild()

// cloneArgs is the kernel's struct clone_args.
type cloneArgs struct {
	flags, pidFD, childTID, parentTID, exitSignal, stack, stackSize, tls, setTID, setTIDSize, cgroup uint64
}

// atFDCWD is AT_FDCWD as a system call's argument.
const atFDCWD = ^uintptr(99) // -100

// childOp is one step of building the world, in the child.
type childOp struct {
	kind     uintptr // opMkdir ...
	path     *byte
	arg      *byte   // opBind: the source; opSymlink: the text; opMount: the file system type
	data     *byte   // opMount: its options
	flags    uintptr // opMount: mount flags
	attr     *unix.MountAttr
	optional bool   // a failure skips it (and reports it as skipped)
	top      bool   // opBind: attr on the bound directory only, not on its submounts
	what     string // for the host's errors
}

const (
	opMkdir = iota
	opFile
	opSymlink
	opBind  // a recursive bind, then attr set recursively
	opMount // a new file system
)

// childRule is a Landlock rule the child adds for a path that exists only in its
// world (TMPDIR).
type childRule struct {
	path *byte
	attr unix.LandlockPathBeneathAttr
}

// childArgs is everything worldChild does, prepared by the host.
type childArgs struct {
	clone cloneArgs

	// A user namespace of its own (a host without root): the child maps its own
	// ids, as unshare -r does.
	ownUser                         bool
	setgroupsPath, uidPath, gidPath *byte
	deny, uidMap, gidMap            []byte

	private, root, tmpfs, oldroot, oldrootAbs, dot *byte
	rootData                                       *byte
	ops                                            []childOp
	roAttr                                         unix.MountAttr
	dir                                            *byte

	fds    []int // fds[i] becomes the child's descriptor i (-1: closed)
	nextfd int   // above every descriptor the child uses

	keyring bool

	rlimits []childRlimit

	dropCaps   bool // a root host: SECBIT_NOROOT, no ambient or inheritable capability
	securebits uintptr
	capHdr     unix.CapUserHeader
	capData    [2]unix.CapUserData

	ruleset      int // a Landlock ruleset, -1 for none
	rulesetFlags uintptr
	rules        []childRule

	filter *unix.SockFprog // a seccomp filter, or nil

	probe bool // exit 0 where the execve would be
	path  *byte
	argv  []*byte
	envv  []*byte

	errFD  int
	report childReport
}

type childRlimit struct {
	resource uintptr
	lim      unix.Rlimit
}

// childReport is what the child writes to the host before its execve: a record
// per skipped optional step, or one for the step that failed (then it exits).
type childReport struct {
	step, index, errno uint32
}

// The child's steps, for its report.
const (
	stepUserMap = iota + 1
	stepProcessGroup
	stepParentDeath
	stepCgroupNS
	stepPrivate
	stepRoot
	stepPivot
	stepOp
	stepDetach
	stepReadOnly
	stepDir
	stepFDs
	stepKeyring
	stepRlimit
	stepNoNewPrivs
	stepCaps
	stepLandlock
	stepSeccomp
	stepExec
	stepSkipped = 100
)

var stepNames = map[uint32]string{
	stepUserMap:      "map its user and group ids in its user namespace",
	stepProcessGroup: "make its process group",
	stepParentDeath:  "set its parent-death signal",
	stepCgroupNS:     "make its cgroup namespace",
	stepPrivate:      "make its mounts private",
	stepRoot:         "mount its root",
	stepPivot:        "make it its root (pivot_root)",
	stepDetach:       "detach the host's root",
	stepReadOnly:     "make its root read-only",
	stepDir:          "enter its working directory",
	stepFDs:          "set its file descriptors",
	stepKeyring:      "join a new session keyring",
	stepRlimit:       "set its resource limits",
	stepNoNewPrivs:   "set no_new_privs",
	stepCaps:         "drop its capabilities",
	stepLandlock:     "apply Landlock",
	stepSeccomp:      "install its seccomp filter",
	stepExec:         "execute it",
}

// forkWorld clones the child of a and returns its pid, or the clone's error. a and
// everything it points to must stay alive until the child has reported. The child
// runs the rest of this function, in this frame (made before the fork: nothing the
// child calls may grow the stack), and never returns.
//
//go:norace
//go:nocheckptr
func forkWorld(a *childArgs) (pid int, err syscall.Errno) {
	var (
		e      syscall.Errno
		r, fd  uintptr
		i      int
		op     *childOp
		step   uint32
		index  int
		nextfd int
	)
	runtime_BeforeFork()
	r, fd = rawVforkSyscall(unix.SYS_CLONE3, uintptr(unsafe.Pointer(&a.clone)), unsafe.Sizeof(a.clone), 0)
	if fd != 0 || r != 0 {
		// The parent, once the child has exec'd or exited: this frame's other
		// variables are the child's now.
		runtime_AfterFork()
		return int(r), syscall.Errno(fd)
	}

	// The child.
	runtime_AfterForkInChild()

	if a.ownUser {
		step = stepUserMap
		if fd, _, e = syscall.RawSyscall6(unix.SYS_OPENAT, atFDCWD, uintptr(unsafe.Pointer(a.setgroupsPath)), unix.O_WRONLY|unix.O_CLOEXEC, 0, 0, 0); e != 0 {
			goto fail
		}
		_, _, e = syscall.RawSyscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(&a.deny[0])), uintptr(len(a.deny)))
		syscall.RawSyscall(unix.SYS_CLOSE, fd, 0, 0)
		if e != 0 {
			goto fail
		}
		if fd, _, e = syscall.RawSyscall6(unix.SYS_OPENAT, atFDCWD, uintptr(unsafe.Pointer(a.uidPath)), unix.O_WRONLY|unix.O_CLOEXEC, 0, 0, 0); e != 0 {
			goto fail
		}
		_, _, e = syscall.RawSyscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(&a.uidMap[0])), uintptr(len(a.uidMap)))
		syscall.RawSyscall(unix.SYS_CLOSE, fd, 0, 0)
		if e != 0 {
			goto fail
		}
		if fd, _, e = syscall.RawSyscall6(unix.SYS_OPENAT, atFDCWD, uintptr(unsafe.Pointer(a.gidPath)), unix.O_WRONLY|unix.O_CLOEXEC, 0, 0, 0); e != 0 {
			goto fail
		}
		_, _, e = syscall.RawSyscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(&a.gidMap[0])), uintptr(len(a.gidMap)))
		syscall.RawSyscall(unix.SYS_CLOSE, fd, 0, 0)
		if e != 0 {
			goto fail
		}
	}
	step = stepProcessGroup
	if _, _, e = syscall.RawSyscall(unix.SYS_SETPGID, 0, 0, 0); e != 0 {
		goto fail
	}
	step = stepParentDeath
	if _, _, e = syscall.RawSyscall6(unix.SYS_PRCTL, unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0, 0); e != 0 {
		goto fail
	}
	// A cgroup namespace rooted at the cgroups it is in now (those it was cloned
	// into, or joined by its thread): what it sees of cgroups stops there.
	step = stepCgroupNS
	if _, _, e = syscall.RawSyscall(unix.SYS_UNSHARE, unix.CLONE_NEWCGROUP, 0, 0); e != 0 {
		goto fail
	}

	// The world: a tmpfs mounted on a host directory, made the root, the host's
	// root under it at /oldroot while the entries are bound from it, then detached.
	step = stepPrivate
	if _, _, e = syscall.RawSyscall6(unix.SYS_MOUNT, 0, uintptr(unsafe.Pointer(a.root)), 0, unix.MS_REC|unix.MS_PRIVATE, 0, 0); e != 0 {
		goto fail
	}
	step = stepRoot
	if _, _, e = syscall.RawSyscall6(unix.SYS_MOUNT, uintptr(unsafe.Pointer(a.tmpfs)), uintptr(unsafe.Pointer(a.private)), uintptr(unsafe.Pointer(a.tmpfs)), unix.MS_NOSUID|unix.MS_NODEV, uintptr(unsafe.Pointer(a.rootData)), 0); e != 0 {
		goto fail
	}
	step = stepPivot
	if _, _, e = syscall.RawSyscall(unix.SYS_CHDIR, uintptr(unsafe.Pointer(a.private)), 0, 0); e != 0 {
		goto fail
	}
	if _, _, e = syscall.RawSyscall(unix.SYS_MKDIRAT, atFDCWD, uintptr(unsafe.Pointer(a.oldroot)), 0o700); e != 0 {
		goto fail
	}
	if _, _, e = syscall.RawSyscall(unix.SYS_PIVOT_ROOT, uintptr(unsafe.Pointer(a.dot)), uintptr(unsafe.Pointer(a.oldroot)), 0); e != 0 {
		goto fail
	}
	if _, _, e = syscall.RawSyscall(unix.SYS_CHDIR, uintptr(unsafe.Pointer(a.root)), 0, 0); e != 0 {
		goto fail
	}
	step = stepOp
	for index = 0; index < len(a.ops); index++ {
		op = &a.ops[index]
		switch op.kind {
		case opMkdir:
			_, _, e = syscall.RawSyscall(unix.SYS_MKDIRAT, atFDCWD, uintptr(unsafe.Pointer(op.path)), 0o755)
			if e == unix.EEXIST {
				e = 0
			}
		case opFile:
			_, _, e = syscall.RawSyscall6(unix.SYS_MKNODAT, atFDCWD, uintptr(unsafe.Pointer(op.path)), unix.S_IFREG|0o644, 0, 0, 0)
			if e == unix.EEXIST {
				e = 0
			}
		case opSymlink:
			_, _, e = syscall.RawSyscall(unix.SYS_SYMLINKAT, uintptr(unsafe.Pointer(op.arg)), atFDCWD, uintptr(unsafe.Pointer(op.path)))
		case opBind:
			_, _, e = syscall.RawSyscall6(unix.SYS_MOUNT, uintptr(unsafe.Pointer(op.arg)), uintptr(unsafe.Pointer(op.path)), 0, unix.MS_BIND|unix.MS_REC, 0, 0)
			if e == 0 {
				fd = unix.AT_RECURSIVE
				if op.top {
					fd = 0
				}
				_, _, e = syscall.RawSyscall6(unix.SYS_MOUNT_SETATTR, atFDCWD, uintptr(unsafe.Pointer(op.path)), fd, uintptr(unsafe.Pointer(op.attr)), unsafe.Sizeof(*op.attr), 0)
			}
		case opMount:
			_, _, e = syscall.RawSyscall6(unix.SYS_MOUNT, uintptr(unsafe.Pointer(op.arg)), uintptr(unsafe.Pointer(op.path)), uintptr(unsafe.Pointer(op.arg)), op.flags, uintptr(unsafe.Pointer(op.data)), 0)
		}
		if e != 0 {
			if !op.optional {
				goto fail
			}
			a.report = childReport{stepSkipped, uint32(index), uint32(e)}
			syscall.RawSyscall(unix.SYS_WRITE, uintptr(a.errFD), uintptr(unsafe.Pointer(&a.report)), unsafe.Sizeof(a.report))
			e = 0
		}
	}
	index = 0
	step = stepDetach
	if _, _, e = syscall.RawSyscall(unix.SYS_UMOUNT2, uintptr(unsafe.Pointer(a.oldrootAbs)), unix.MNT_DETACH, 0); e != 0 {
		goto fail
	}
	if _, _, e = syscall.RawSyscall(unix.SYS_UNLINKAT, atFDCWD, uintptr(unsafe.Pointer(a.oldrootAbs)), unix.AT_REMOVEDIR); e != 0 {
		goto fail
	}
	step = stepReadOnly
	if _, _, e = syscall.RawSyscall6(unix.SYS_MOUNT_SETATTR, atFDCWD, uintptr(unsafe.Pointer(a.root)), 0, uintptr(unsafe.Pointer(&a.roAttr)), unsafe.Sizeof(a.roAttr), 0); e != 0 {
		goto fail
	}
	step = stepDir
	if _, _, e = syscall.RawSyscall(unix.SYS_CHDIR, uintptr(unsafe.Pointer(a.dir)), 0, 0); e != 0 {
		goto fail
	}

	// Descriptors: those below i that must move up first, then each into place,
	// then every other one closed at the execve.
	step = stepFDs
	nextfd = a.nextfd
	for i = 0; i < len(a.fds); i++ {
		if a.fds[i] >= 0 && a.fds[i] < i {
			if _, _, e = syscall.RawSyscall(unix.SYS_DUP3, uintptr(a.fds[i]), uintptr(nextfd), unix.O_CLOEXEC); e != 0 {
				goto fail
			}
			a.fds[i] = nextfd
			nextfd++
		}
	}
	for i = 0; i < len(a.fds); i++ {
		if a.fds[i] == -1 {
			syscall.RawSyscall(unix.SYS_CLOSE, uintptr(i), 0, 0)
			continue
		}
		if a.fds[i] == i {
			if _, _, e = syscall.RawSyscall(unix.SYS_FCNTL, uintptr(i), unix.F_SETFD, 0); e != 0 {
				goto fail
			}
			continue
		}
		if _, _, e = syscall.RawSyscall(unix.SYS_DUP3, uintptr(a.fds[i]), uintptr(i), 0); e != 0 {
			goto fail
		}
	}
	if _, _, e = syscall.RawSyscall(unix.SYS_CLOSE_RANGE, uintptr(len(a.fds)), ^uintptr(0)>>32, unix.CLOSE_RANGE_CLOEXEC); e != 0 {
		goto fail
	}

	if a.keyring {
		step = stepKeyring
		if _, _, e = syscall.RawSyscall(unix.SYS_KEYCTL, unix.KEYCTL_JOIN_SESSION_KEYRING, 0, 0); e != 0 {
			goto fail
		}
	}
	step = stepRlimit
	for index = 0; index < len(a.rlimits); index++ {
		if _, _, e = syscall.RawSyscall6(unix.SYS_PRLIMIT64, 0, a.rlimits[index].resource, uintptr(unsafe.Pointer(&a.rlimits[index].lim)), 0, 0, 0); e != 0 {
			goto fail
		}
	}
	index = 0
	step = stepNoNewPrivs
	if _, _, e = syscall.RawSyscall6(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0, 0); e != 0 {
		goto fail
	}
	if a.dropCaps {
		step = stepCaps
		if a.securebits != 0 {
			if _, _, e = syscall.RawSyscall6(unix.SYS_PRCTL, unix.PR_SET_SECUREBITS, a.securebits, 0, 0, 0, 0); e != 0 {
				goto fail
			}
		}
		if _, _, e = syscall.RawSyscall6(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0, 0); e != 0 && e != unix.EINVAL {
			goto fail
		}
		if _, _, e = syscall.RawSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&a.capHdr)), uintptr(unsafe.Pointer(&a.capData[0])), 0); e != 0 {
			goto fail
		}
	}
	if a.ruleset >= 0 {
		step = stepLandlock
		for index = 0; index < len(a.rules); index++ {
			if fd, _, e = syscall.RawSyscall6(unix.SYS_OPENAT, atFDCWD, uintptr(unsafe.Pointer(a.rules[index].path)), unix.O_PATH|unix.O_CLOEXEC, 0, 0, 0); e != 0 {
				goto fail
			}
			a.rules[index].attr.Parent_fd = int32(fd)
			_, _, e = syscall.RawSyscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(a.ruleset), unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&a.rules[index].attr)), 0, 0, 0)
			syscall.RawSyscall(unix.SYS_CLOSE, fd, 0, 0)
			if e != 0 {
				goto fail
			}
		}
		index = 0
		if _, _, e = syscall.RawSyscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(a.ruleset), a.rulesetFlags, 0); e != 0 {
			goto fail
		}
	}
	if a.filter != nil {
		step = stepSeccomp
		if _, _, e = syscall.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(a.filter))); e != 0 {
			goto fail
		}
	}
	if a.probe {
		syscall.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0)
	}
	step = stepExec
	_, _, e = syscall.RawSyscall(unix.SYS_EXECVE, uintptr(unsafe.Pointer(a.path)), uintptr(unsafe.Pointer(&a.argv[0])), uintptr(unsafe.Pointer(&a.envv[0])))

fail:
	a.report = childReport{step, uint32(index), uint32(e)}
	syscall.RawSyscall(unix.SYS_WRITE, uintptr(a.errFD), uintptr(unsafe.Pointer(&a.report)), unsafe.Sizeof(a.report))
	for {
		syscall.RawSyscall(unix.SYS_EXIT_GROUP, 127, 0, 0)
	}
}
