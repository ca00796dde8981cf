//go:build linux

package sandbox

import (
	"fmt"
	"os"
)

// DisableLandlock makes the package behave as on a kernel without Landlock until
// the returned function is called.
func DisableLandlock() (restore func()) {
	landlockDisabled = true
	return func() { landlockDisabled = false }
}

// DisableThreadStart makes confined programs start under the launcher, as outside
// ModeNamespace, until the returned function is called.
func DisableThreadStart() (restore func()) {
	threadStartDisabled = true
	return func() { threadStartDisabled = false }
}

// ThreadStart reports whether confined programs start from a confined thread here.
func ThreadStart() bool { return threadStart() }

// DisableWorld makes confined programs start without a world of their own, as
// where the kernel refuses the namespaces, until the returned function is called.
func DisableWorld() (restore func()) {
	worldDisabled = true
	return func() { worldDisabled = false }
}

// BwrapArgs are bubblewrap's arguments for the world a confined /bin/true-like
// program gets here (benchmarks): the same entries, namespaces and caps.
func BwrapArgs(program string) []string {
	w := newWorldPlan(program, &Confinement{}, nil, "/")
	args := []string{"--unshare-pid", "--unshare-ipc", "--unshare-net", "--die-with-parent"}
	if os.Geteuid() == 0 {
		args = append(args, "--cap-drop", "ALL")
	} else {
		args = append(args, "--unshare-user")
	}
	for _, e := range w.entries {
		switch e.kind {
		case entryDir:
			args = append(args, "--dir", e.target)
		case entryLink:
			args = append(args, "--symlink", e.source, e.target)
		case entryBind:
			if e.write {
				args = append(args, "--bind", e.source, e.target)
			} else {
				args = append(args, "--ro-bind", e.source, e.target)
			}
		case entryDevice:
			args = append(args, "--dev-bind", e.source, e.target)
		case entryTmpfs:
			args = append(args, "--size", fmt.Sprint(w.tmp.Bytes), "--tmpfs", e.target)
		case entryProc:
			args = append(args, "--proc", e.target)
		}
	}
	return append(args, "--remount-ro", "/", "--chdir", "/", program)
}

// CPUDelegated reports whether the cgroups made for sources have the cgroup v2 cpu
// controller (cpu.weight, cpu.max).
func CPUDelegated() bool { return cpuShared() }

// Cgroup2Mount is where the cgroup v2 hierarchy is mounted, "" when nowhere.
func Cgroup2Mount() string { return cgroup2Mount() }

// CPUMount is where the cgroup v1 cpu controller is mounted, "" when nowhere.
func CPUMount() string { return cpuMount() }
