package sandbox

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// worldPlan is what Command prepares for a start in a world (see startWorld).
type worldPlan struct {
	entries []worldEntry
	dir     string // the working directory, resolved
	tmp     TmpLimits
	network bool
}

// newWorldPlan plans the world of program (an absolute path) confined by c, with
// the host's shared directories extraWrite, working in dir.
func newWorldPlan(program string, c *Confinement, extraWrite []string, dir string) *worldPlan {
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	return &worldPlan{
		entries: worldEntries(program, c, extraWrite, dir),
		dir:     dir,
		tmp:     TmpLimits(c.Tmp).withDefaults(),
		network: c.Network,
	}
}

// startWorld starts the program in a world of its own, built from nothing in its
// own namespaces by the child of one clone3 before its execve (fork_linux.go):
//
//   - a PID namespace (the program is its init: its tree ends with it), a mount
//     namespace whose root holds only its world (world_linux.go), an IPC namespace,
//     a network namespace unless Network (loopback only, down: no socket but a path
//     in its world reaches past it, and abstract unix names are its own), a cgroup
//     namespace rooted at the cgroups it starts in (the child unshares it once it
//     is in them: /proc/self/cgroup names none of the host's), and, without root, a
//     user namespace that maps the host's ids to themselves;
//   - a new session keyring, and the keyring calls refused by its seccomp filter;
//   - no descriptor but its standard ones and Cmd.ExtraFiles (every other one is
//     closed at the execve, whatever the host inherited);
//   - its limits, no_new_privs, no capability (a root host's SECBIT_NOROOT), its
//     Landlock ruleset and its seccomp filter (seccompFilter with world), set by
//     the child itself: no instruction of the program runs without them.
//
// Without root, the program runs as the host's user inside its user namespace,
// with no capability there either (it is not uid 0 there).
func (b *Box) startWorld() (err error) {
	w := b.world
	a := &childArgs{ruleset: -1, errFD: -1}
	var closeAfter []*os.File
	defer func() {
		for _, f := range closeAfter {
			f.Close()
		}
		if a.ruleset >= 0 {
			unix.Close(a.ruleset)
		}
		if err != nil {
			for _, f := range b.parentIO {
				f.Close()
			}
			b.parentIO = nil
		}
	}()

	// Standard descriptors and Cmd.ExtraFiles.
	fds, opened, err := b.childFDs()
	closeAfter = append(closeAfter, opened...)
	if err != nil {
		return fmt.Errorf("sandbox: start %s: %w", b.plan.Path, err)
	}
	a.fds = fds

	// Landlock: the ruleset of the host's paths, and TMPDIR's rule added by the child.
	if c := b.plan.Confine; c != nil {
		fd, flags, err := ruleset(b.plan.Path, c)
		if err != nil {
			return fmt.Errorf("sandbox: confine %s: %w", b.plan.Path, err)
		}
		a.ruleset, a.rulesetFlags = fd, uintptr(flags)
		if fd >= 0 {
			a.rules = []childRule{{path: cstr(worldTmp), attr: unix.LandlockPathBeneathAttr{Allowed_access: landlockWriteAccess()}}}
		}
	}
	if prog := seccompFilter(w.network, true); prog != nil {
		a.filter = &unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	}
	if err := a.prepare(b.plan.Path, b.Cmd.Args, b.Cmd.Env, w, b.plan.Limits); err != nil {
		return fmt.Errorf("sandbox: start %s: %w", b.plan.Path, err)
	}

	cgroups, err := b.openCgroups()
	if err != nil {
		return fmt.Errorf("sandbox: start %s: %w", b.plan.Path, err)
	}
	defer cgroups.Close()
	if cgroups != nil && cgroups.dir != nil {
		a.clone.flags |= unix.CLONE_INTO_CGROUP
		a.clone.cgroup = uint64(cgroups.dir.Fd())
	}
	pid, skipped, err := runChild(a, cgroups)
	if err != nil {
		return fmt.Errorf("sandbox: start %s: %w", b.plan.Path, err)
	}
	b.Cmd.Process, err = os.FindProcess(pid)
	if err != nil { // not on Linux: FindProcess of a child only opens its pidfd
		_ = syscall.Kill(pid, syscall.SIGKILL)
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(pid, &ws, 0, nil)
		return fmt.Errorf("sandbox: start %s: %w", b.plan.Path, err)
	}
	b.layers = worldLayers(a, w, b, skipped)
	return nil
}

// runChild clones a's child, lets it report, and returns its pid and the entries it
// skipped (by index), or why it failed (then it has been reaped).
func runChild(a *childArgs, cgroups *cgroupJoin) (pid int, skipped []int, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return 0, nil, err
	}
	r := os.NewFile(uintptr(p[0]), "report")
	defer r.Close()
	a.errFD = above(p[1], len(a.fds))
	if a.ruleset >= 0 {
		a.ruleset = above(a.ruleset, len(a.fds))
	}
	a.nextfd = max(a.errFD, a.ruleset, len(a.fds)) + 1
	for _, fd := range a.fds {
		a.nextfd = max(a.nextfd, fd+1)
	}
	if cgroups.threadJoins() { // cgroup v1: the forking thread joins for the clone
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := cgroups.enter()
		defer cgroups.exit()
		if err != nil {
			unix.Close(a.errFD)
			return 0, nil, err
		}
	}
	pid, errno := forkWorld(a)
	unix.Close(a.errFD)
	runtime.KeepAlive(a)
	if errno != 0 {
		if isRefusal(errno) {
			return 0, nil, fmt.Errorf("clone into new namespaces: %w (%w)", errno, errWorldRefused)
		}
		return 0, nil, fmt.Errorf("clone into new namespaces: %w", errno)
	}
	data, _ := io.ReadAll(r)
	var failed *childReport
	for len(data) >= 12 {
		rep := childReport{binary.NativeEndian.Uint32(data), binary.NativeEndian.Uint32(data[4:]), binary.NativeEndian.Uint32(data[8:])}
		data = data[12:]
		if rep.step == stepSkipped {
			skipped = append(skipped, int(rep.index))
		} else {
			failed = &rep
		}
	}
	if failed == nil {
		return pid, skipped, nil
	}
	var ws syscall.WaitStatus
	for {
		if _, err := syscall.Wait4(pid, &ws, 0, nil); !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	errno = syscall.Errno(failed.errno)
	what := stepNames[failed.step]
	if failed.step == stepOp && int(failed.index) < len(a.ops) {
		what = a.ops[failed.index].what
	}
	err = fmt.Errorf("in its new namespaces, %s: %w", what, errno)
	if failed.step <= stepReadOnly && isRefusal(errno) {
		err = fmt.Errorf("%w (%w)", err, errWorldRefused)
	}
	return 0, nil, err
}

// above returns fd, moved (close-on-exec) to at least min when it is below.
func above(fd, min int) int {
	if fd >= min {
		return fd
	}
	nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, min)
	if err != nil {
		return fd
	}
	unix.Close(fd)
	return nfd
}

// prepare fills in a for program with argv and env in world w, limited by l.
func (a *childArgs) prepare(program string, argv, env []string, w *worldPlan, l Limits) error {
	root := os.Geteuid() == 0
	a.clone.flags = unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC
	if !w.network {
		a.clone.flags |= unix.CLONE_NEWNET
	}
	if !root {
		a.clone.flags |= unix.CLONE_NEWUSER
		a.ownUser = true
		a.setgroupsPath, a.uidPath, a.gidPath = cstr("/proc/self/setgroups"), cstr("/proc/self/uid_map"), cstr("/proc/self/gid_map")
		a.deny = []byte("deny")
		a.uidMap = fmt.Appendf(nil, "%d %d 1", os.Geteuid(), os.Geteuid())
		a.gidMap = fmt.Appendf(nil, "%d %d 1", os.Getegid(), os.Getegid())
	}
	a.clone.flags |= unix.CLONE_VM | unix.CLONE_VFORK
	a.clone.exitSignal = uint64(unix.SIGCHLD)
	base := worldBase()
	if base == "" {
		return errors.New("no directory to mount its root on (/tmp, /mnt)")
	}
	a.private, a.root, a.tmpfs, a.dot = cstr(base), cstr("/"), cstr("tmpfs"), cstr(".")
	a.oldroot, a.oldrootAbs = cstr("oldroot"), cstr("/oldroot")
	a.rootData = cstr("mode=0755,size=1m,nr_inodes=4096")
	a.roAttr = unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	a.ops = worldOps(w)
	a.dir = cstr(w.dir)
	a.keyring = true

	set := func(res int, v int64) {
		var cur unix.Rlimit
		if v < 0 || unix.Getrlimit(res, &cur) != nil {
			return
		}
		if uint64(v) > cur.Max {
			v = int64(cur.Max) // only root may raise a hard limit
		}
		a.rlimits = append(a.rlimits, childRlimit{uintptr(res), unix.Rlimit{Cur: uint64(v), Max: uint64(v)}})
	}
	set(unix.RLIMIT_DATA, l.MemoryBytes)
	set(unix.RLIMIT_NOFILE, l.OpenFiles)
	if !root {
		set(unix.RLIMIT_NPROC, l.Processes) // alone in its user namespace: its tree
	}
	if root {
		a.dropCaps = true
		a.capHdr = unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		if err := unix.Capget(&a.capHdr, &a.capData[0]); err != nil {
			return fmt.Errorf("read capabilities: %w", err)
		}
		a.capData[0].Inheritable, a.capData[1].Inheritable = 0, 0
		if a.capData[unix.CAP_SETPCAP/32].Effective&(1<<(unix.CAP_SETPCAP%32)) != 0 {
			bits, err := unix.PrctlRetInt(unix.PR_GET_SECUREBITS, 0, 0, 0, 0)
			if err != nil {
				return fmt.Errorf("read securebits: %w", err)
			}
			const noRoot = 1<<0 | 1<<1 // SECBIT_NOROOT, SECBIT_NOROOT_LOCKED (linux/securebits.h)
			a.securebits = uintptr(bits | noRoot)
		}
	}

	var err error
	if a.path, err = syscall.BytePtrFromString(program); err != nil {
		return err
	}
	if len(argv) == 0 {
		argv = []string{program}
	}
	if a.argv, err = syscall.SlicePtrFromStrings(argv); err != nil {
		return err
	}
	if a.envv, err = syscall.SlicePtrFromStrings(env); err != nil {
		return err
	}
	return nil
}

// worldOps are the child's steps that build w under its new root, with the host's
// root at /oldroot.
func worldOps(w *worldPlan) []childOp {
	var ops []childOp
	made := map[string]bool{"/": true}
	var done []worldEntry
	mkdirs := func(p string) {
		var missing []string
		for d := p; !made[d] && !hostHas(done, d); d = filepath.Dir(d) {
			missing = append(missing, d)
		}
		for _, d := range slices.Backward(missing) {
			made[d] = true
			ops = append(ops, childOp{kind: opMkdir, path: cstr(d), what: "make directory " + d})
		}
	}
	attr := func(e worldEntry) *unix.MountAttr {
		a := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
		if e.kind == entryDevice {
			a.Attr_set = unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NOEXEC
		}
		if !e.write {
			a.Attr_set |= unix.MOUNT_ATTR_RDONLY
		}
		return a
	}
	for _, e := range w.entries {
		what := describeEntry(e)
		switch e.kind {
		case entryDir:
			mkdirs(e.target)
		case entryLink:
			mkdirs(filepath.Dir(e.target))
			ops = append(ops, childOp{kind: opSymlink, path: cstr(e.target), arg: cstr(e.source), what: what})
		case entryBind, entryDevice:
			if !hostHas(done, e.target) {
				if e.file {
					mkdirs(filepath.Dir(e.target))
					ops = append(ops, childOp{kind: opFile, path: cstr(e.target), what: what})
				} else {
					mkdirs(e.target)
				}
			}
			ops = append(ops, childOp{kind: opBind, path: cstr(e.target), arg: cstr("/oldroot" + e.source), attr: attr(e), what: what})
		case entryTmpfs:
			mkdirs(e.target)
			// 0 is the kernel's "no cap" for both.
			data := fmt.Sprintf("mode=0700,size=%d,nr_inodes=%d", max(w.tmp.Bytes, 0), max(w.tmp.Files, 0))
			ops = append(ops, childOp{kind: opMount, path: cstr(e.target), arg: cstr("tmpfs"), data: cstr(data), flags: unix.MS_NOSUID | unix.MS_NODEV, what: what})
		case entryProc:
			mkdirs(e.target)
			ops = append(ops, childOp{kind: opMount, path: cstr(e.target), arg: cstr("proc"), data: cstr("subset=pid"),
				flags: unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, optional: true, what: what})
		}
		done = append(done, e)
	}
	// The directories made in TMPDIR only to lead to what is bound beneath it (a
	// plugin's socket directory, a Location under /tmp) are read-only: bound onto
	// themselves, what is mounted in them keeps its own access.
	if tmp := slices.IndexFunc(w.entries, func(e worldEntry) bool { return e.kind == entryTmpfs }); tmp >= 0 {
		t := w.entries[tmp].target
		for _, d := range slices.Sorted(maps.Keys(made)) {
			if filepath.Dir(d) == t {
				ops = append(ops, childOp{kind: opBind, path: cstr(d), arg: cstr(d), top: true,
					attr: &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV},
					what: "make " + d + " read-only"})
			}
		}
	}
	return ops
}

// hostHas reports whether p is, in a world built of es so far, the host's own file
// beneath a bound directory.
func hostHas(es []worldEntry, p string) bool {
	for _, e := range es {
		if e.kind == entryBind && !e.file && isWithin(p, e.target) {
			return true
		}
	}
	return false
}

func cstr(s string) *byte {
	p, err := syscall.BytePtrFromString(s)
	if err != nil {
		panic("sandbox: NUL in " + strconv.Quote(s))
	}
	return p
}

// childFDs returns the descriptors the program gets (0, 1, 2 and Cmd.ExtraFiles)
// as exec.Cmd would pass them: a nil standard input or output is /dev/null, an
// *os.File itself, any other reader or writer a pipe that a goroutine copies
// (Box.Wait waits for it). opened are the files to close once the child has its
// copies.
func (b *Box) childFDs() (fds []int, opened []*os.File, err error) {
	c := b.Cmd
	std := []any{c.Stdin, c.Stdout, c.Stderr}
	for i, s := range std {
		switch f := s.(type) {
		case nil:
			flag := os.O_WRONLY
			if i == 0 {
				flag = os.O_RDONLY
			}
			null, err := os.OpenFile(os.DevNull, flag, 0)
			if err != nil {
				return nil, opened, err
			}
			opened = append(opened, null)
			fds = append(fds, int(null.Fd()))
		case *os.File:
			fds = append(fds, int(f.Fd()))
		default:
			pr, pw, err := os.Pipe()
			if err != nil {
				return nil, opened, err
			}
			// The child's end is closed once it has its copy, the host's when the
			// copy is done (or the start failed).
			child, host := pw, pr
			if i == 0 {
				child, host = pr, pw
			}
			opened = append(opened, child)
			fds = append(fds, int(child.Fd()))
			b.parentIO = append(b.parentIO, host)
			done := make(chan error, 1)
			b.copying = append(b.copying, done)
			go func() {
				var err error
				if i == 0 {
					_, err = io.Copy(host, s.(io.Reader))
				} else {
					_, err = io.Copy(s.(io.Writer), host)
				}
				host.Close()
				done <- err
			}()
		}
	}
	for _, f := range c.ExtraFiles {
		if f == nil {
			fds = append(fds, -1)
		} else {
			fds = append(fds, int(f.Fd()))
		}
	}
	return fds, opened, nil
}

// worldLayers names what holds the program of a world.
func worldLayers(a *childArgs, w *worldPlan, b *Box, skipped []int) []string {
	l := []string{"pid", "mount", "ipc", "cgroupns"}
	if a.clone.flags&unix.CLONE_NEWNET != 0 {
		l = append(l, "net")
	}
	if a.ownUser {
		l = append(l, "user")
	}
	l = append(l, "tmpfs "+w.tmp.String())
	proc := true
	for _, i := range skipped {
		if i < len(a.ops) && strings.Contains(a.ops[i].what, "/proc") {
			proc = false
		}
	}
	if proc {
		l = append(l, "proc")
	}
	l = append(l, "keyring", "fds")
	if a.ruleset >= 0 {
		l = append(l, "landlock "+strconv.Itoa(LandlockABI()))
	}
	if a.filter != nil {
		l = append(l, "seccomp")
	}
	return append(l, b.limitLayers()...)
}

// probeWorld builds a world of the system's files only in a child that exits
// where it would run a program; nil when that works.
func probeWorld() error {
	w := &worldPlan{dir: "/", tmp: TmpLimits{}.withDefaults()}
	w.entries = worldEntries("", &Confinement{}, nil, "/")
	a := &childArgs{ruleset: -1, probe: true}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer null.Close()
	fd := int(null.Fd())
	a.fds = []int{fd, fd, fd}
	if err := a.prepare("/", []string{"probe"}, nil, w, Limits{}.withDefaults()); err != nil {
		return err
	}
	pid, _, err := runChild(a, nil)
	if err != nil {
		return err
	}
	var ws syscall.WaitStatus
	for {
		if _, err := syscall.Wait4(pid, &ws, 0, nil); !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if !ws.Exited() || ws.ExitStatus() != 0 {
		return fmt.Errorf("the probe ended with %v", waitStatusString(unix.WaitStatus(ws)))
	}
	return nil
}
