package sandbox

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/toolhost/toolhost/sandbox"
)

// OffEnv, in the host's environment, names layers of confinement the host leaves
// off, comma-separated: "world" (a confined program starts without a world of its
// own, as where the kernel refuses the namespaces), "landlock", "seccomp", "cpu"
// (no cgroup v1 cpu cgroup of its own for a program), "nice" (no lower priority
// once busy where a program has no cgroup cpu controller). It is for tests and
// diagnosis: each layer can be shown to hold alone. Whoever sets the host's
// environment controls the host anyway.
const OffEnv = "TOOLHOST_SANDBOX_OFF"

// Off reports whether OffEnv turns layer off.
func Off(layer string) bool {
	v := os.Getenv(OffEnv)
	return v != "" && slices.Contains(strings.Split(v, ","), layer)
}

// Spec says how a source's process is contained and confined. The zero value
// contains nothing and confines nothing: the program runs as a plain child.
type Spec struct {
	// Name is the source's name; it appears in logs, errors and SourceOf.
	Name string
	// Contain ends the program's whole process tree with it (see Mode).
	Contain bool
	// Mode forces a containment mechanism; "" picks the strongest that works (probed
	// once per host process). A forced mode that the kernel refuses fails the start.
	// ModeNone runs the program as a plain child, unconfined (with a warning).
	Mode Mode
	// Confine, if not nil, confines the program before it starts; nil runs it
	// unconfined. Confinement implies Contain.
	Confine *Confinement
	// Limits caps the program's resources (applied whenever Contain or Confine is set).
	Limits Limits
	// HostPID sets HostPIDEnv in the program's environment (for plugins, whose SDK
	// checks its peer); otherwise the environment is exactly the one given.
	HostPID bool
	// Require refuses to start the program when the confinement cannot be applied
	// (no Landlock in the kernel) instead of running it unconfined with a warning.
	Require bool
}

// Confinement is what a confined program may reach: the public configuration's
// type. Beyond its fields' documentation: the program's own binary and the
// system's shared files (SystemRead) are always readable and executable, a private
// temporary directory (a tmpfs of its own in a world, else made per start and
// removed at the end; TMPDIR) is always writable, and /dev/null is readable and
// writable. Without Network the program has a network namespace of its own where
// it has a world (see WorldAvailable), a seccomp filter refuses other sockets (and
// io_uring), and Landlock (ABI 4 and later) denies TCP bind and connect. Its Tmp
// caps are TmpLimits's.
type Confinement = sandbox.Confinement

// TmpLimits caps a confined program's TMPDIR (Confinement.Tmp). Zero means the
// default; a negative value means no cap (the kernel's tmpfs default then: half
// the RAM, or as many files as half the RAM's pages).
type TmpLimits sandbox.TmpLimits

// The default caps of a confined program's TMPDIR.
const (
	DefaultTmpBytes = 64 << 20
	DefaultTmpFiles = 4096
)

// String describes the caps ("64MiB, 4096 files").
func (t TmpLimits) String() string {
	t = t.withDefaults()
	size, files := "unlimited", "unlimited"
	if t.Bytes > 0 {
		size = FormatBytes(t.Bytes)
	}
	if t.Files > 0 {
		files = fmt.Sprint(t.Files)
	}
	return size + ", " + files + " files"
}

func (t TmpLimits) withDefaults() TmpLimits {
	if t.Bytes == 0 {
		t.Bytes = DefaultTmpBytes
	}
	if t.Files == 0 {
		t.Files = DefaultTmpFiles
	}
	return t
}

// SystemRead are the paths a confined program may always read and execute:
// programs and libraries, certificates, the alternatives' links, time zones, the
// loader's cache (and the devices of worldDevices). In a world they are all it
// sees of the host's system.
var SystemRead = []string{
	"/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin",
	"/etc/ssl", "/etc/ca-certificates", "/etc/pki", "/etc/alternatives", "/etc/localtime",
	"/etc/ld.so.cache", "/usr/share/zoneinfo", "/dev/urandom", "/dev/random", "/dev/zero",
}

// Limits caps a contained program's resources: the public configuration's
// fields. Zero means the default; a negative value means no limit. How each
// holds: MemoryBytes caps the program's data segment (RLIMIT_DATA: heap and
// private writable mappings, which is what a runtime's allocations grow;
// RLIMIT_AS would break runtimes that reserve address space), default
// DefaultMemoryBytes. Processes caps the processes (threads included) of the
// tree through a cgroup's pids.max where this process may make one, else through
// RLIMIT_NPROC, which the kernel counts per user and user namespace and never
// applies to root: so for a program alone in its user namespace, without root
// (Box.ProcessesCapped); default DefaultProcesses. OpenFiles caps the open file
// descriptors of each process (RLIMIT_NOFILE, soft and hard), default
// DefaultOpenFiles. CPUs caps the CPU time of the program's tree at this many
// CPUs, a quota per period of CPUPeriod: cgroup v2 cpu.max where the cgroup v2 cpu
// controller is delegated to this process, else cgroup v1 cpu.cfs_quota_us where
// its program has a v1 cpu cgroup (its cgroup then has a share of its own too, see
// Box.cpuLayers); elsewhere it has no effect, and Box.Layers names no "cpu max" or
// "cpu quota"; 0 (the default) or negative: no cap.
type Limits sandbox.Limits

// CPUPeriod is the period of Limits.CPUs' quota, in microseconds (cpu.max).
const CPUPeriod = 100000

// cpuMax is the line written to a cgroup's cpu.max for l: "QUOTA PERIOD", or "max
// PERIOD" without a cap. The kernel takes no quota below 1000 µs.
func (l Limits) cpuMax() string {
	if l.CPUs <= 0 {
		return fmt.Sprintf("max %d", CPUPeriod)
	}
	return fmt.Sprintf("%d %d", l.cfsQuota(), CPUPeriod)
}

// cfsQuota is l's quota per CPUPeriod in microseconds, -1 without a cap (cgroup
// v1's cpu.cfs_quota_us). The kernel takes no quota below 1000 µs.
func (l Limits) cfsQuota() int64 {
	if l.CPUs <= 0 {
		return -1
	}
	return max(int64(l.CPUs*CPUPeriod), 1000)
}

// The default limits.
const (
	DefaultMemoryBytes = 1 << 30
	DefaultProcesses   = 256
	DefaultOpenFiles   = 1024
)

func (l Limits) withDefaults() Limits {
	def := func(v *int64, d int64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&l.MemoryBytes, DefaultMemoryBytes)
	def(&l.Processes, DefaultProcesses)
	def(&l.OpenFiles, DefaultOpenFiles)
	return l
}

// String describes the limits in force, for errors ("memory 1GiB (RLIMIT_DATA),
// processes 256, open files 1024").
func (l Limits) String() string {
	l = l.withDefaults()
	var parts []string
	add := func(name string, v int64, s string) {
		if v < 0 {
			parts = append(parts, name+" unlimited")
		} else {
			parts = append(parts, name+" "+s)
		}
	}
	add("memory", l.MemoryBytes, FormatBytes(l.MemoryBytes)+" (RLIMIT_DATA)")
	add("processes", l.Processes, fmt.Sprint(l.Processes))
	add("open files", l.OpenFiles, fmt.Sprint(l.OpenFiles))
	if l.CPUs > 0 {
		parts = append(parts, fmt.Sprintf("cpus %g (cpu.max or cpu.cfs_quota_us, where a cgroup allows)", l.CPUs))
	}
	return strings.Join(parts, ", ")
}

// FormatBytes writes n in the largest binary unit that divides it ("512MiB").
func FormatBytes(n int64) string {
	for _, u := range []struct {
		s string
		n int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.n && n%u.n == 0 {
			return fmt.Sprintf("%d%s", n/u.n, u.s)
		}
	}
	return fmt.Sprintf("%dB", n)
}

// ParseBytes reads a size: a number of bytes, or a number with a unit B, KiB, MiB,
// GiB (or KB/MB/GB, read as the binary units).
func ParseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	num := strings.TrimRight(s, "KMGiBkmgb ")
	unit := strings.TrimSpace(s[len(num):])
	var n int64
	if _, err := fmt.Sscan(num, &n); err != nil || n < 0 || fmt.Sprint(n) != num {
		return 0, fmt.Errorf("sandbox: size %q: want a number of bytes with an optional unit (B, KiB, MiB, GiB)", s)
	}
	mult := map[string]int64{"": 1, "B": 1, "KiB": 1 << 10, "KB": 1 << 10, "MiB": 1 << 20, "MB": 1 << 20, "GiB": 1 << 30, "GB": 1 << 30}[unit]
	if mult == 0 {
		return 0, fmt.Errorf("sandbox: size %q: unknown unit %q (B, KiB, MiB, GiB)", s, unit)
	}
	if n > (1<<62)/mult {
		return 0, fmt.Errorf("sandbox: size %q is too large", s)
	}
	return n * mult, nil
}

// Mode is how a contained process tree is held together (the public
// configuration's type).
type Mode = sandbox.Mode

const (
	// ModeNamespace: the program (or, where a confined program cannot start from a
	// confined thread, its launcher) is PID 1 of a new PID namespace (inside a new
	// user namespace when the host is not root); when it exits, the kernel kills
	// every process of the namespace. Holds against setsid, double forks and a
	// SIGKILLed host (its parent-death signal is SIGKILL).
	ModeNamespace = sandbox.ModeNamespace
	// ModeCgroup: the launcher starts in its own cgroup v2 directory; stopping writes
	// cgroup.kill. A SIGKILLed host: the launcher's parent-death signal makes it kill
	// its cgroup (if the launcher itself was SIGKILLed first, nothing does).
	ModeCgroup = sandbox.ModeCgroup
	// ModeSubreaper: the launcher is a child subreaper, so orphans of the tree are
	// reparented to it; when the program exits, when asked to stop, or when the host
	// dies (its parent-death signal), it kills and reaps every descendant until none
	// is left. A process that escapes while the launcher itself is SIGKILLed survives.
	ModeSubreaper = sandbox.ModeSubreaper
	// ModeNone: no launcher; the program is a plain child in its own process group.
	ModeNone = sandbox.ModeNone
)
