// Package sandbox holds the configuration of how toolhost holds a source's processes:
// contained (the whole process tree ends with the source), confined (what it may
// reach), and limited (what it may use). Packages plugins, mcp and manifest take a
// [Spec] in their configs, and package location builds it from a Location config's
// "sandbox" objects; the mechanisms that apply it are internal. docs/design.md
// describes them.
package sandbox

// Spec says how one source's processes are held.
type Spec struct {
	// Name is the source's name; it appears in logs and errors.
	Name string
	// Contain ends the program's whole process tree with it.
	Contain bool
	// Mode forces a containment mechanism; "" picks the strongest that works on
	// this machine. A forced mode that the kernel refuses fails the start. ModeNone
	// runs the program as a plain child, unconfined (with a warning).
	Mode Mode
	// Confine, if not nil, confines the program before it starts; nil runs it
	// unconfined. Confinement implies Contain.
	Confine *Confinement
	// Limits caps the program's resources (applied whenever Contain or Confine is set).
	Limits Limits
	// HostPID tells the program the host's pid (for plugins, whose sdk checks its
	// peer); otherwise the environment is exactly the one given.
	HostPID bool
	// Require refuses to start the program when the confinement cannot be applied
	// instead of running it unconfined with a warning.
	Require bool
}

// Confinement is what a confined program may reach. The program's own binary and
// the system's shared files are always readable and executable, a private
// temporary directory (set as TMPDIR) is always writable, and /dev/null is readable
// and writable.
type Confinement struct {
	// Read lists absolute paths (files or directories, recursively) the program may
	// read and execute beyond the defaults.
	Read []string `json:"read,omitempty"`
	// Write lists absolute paths the program may read, write, create and remove in.
	Write []string `json:"write,omitempty"`
	// Network allows sockets other than AF_UNIX; without it the program reaches no
	// network.
	Network bool `json:"network,omitempty"`
	// Tmp caps the program's TMPDIR where it has a world of its own (a tmpfs);
	// elsewhere TMPDIR is a private directory of the host's, uncapped.
	Tmp TmpLimits `json:"tmp,omitzero"`
}

// TmpLimits caps a confined program's TMPDIR. Zero means the default; a negative
// value means no cap.
type TmpLimits struct {
	// Bytes caps what its files hold. Default 64 MiB.
	Bytes int64 `json:"bytes,omitempty"`
	// Files caps how many files and directories it holds. Default 4096.
	Files int64 `json:"files,omitempty"`
}

// Limits caps a contained program's resources. Zero means the default; a negative
// value means no limit.
type Limits struct {
	// MemoryBytes caps the program's data segment (RLIMIT_DATA). Default 1 GiB. A
	// confined program can hold no shared memory past it: its seccomp filter
	// refuses memfd_create, shared anonymous mappings and System V IPC.
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	// Processes caps the processes (threads included) of the tree. Default 256.
	Processes int64 `json:"processes,omitempty"`
	// OpenFiles caps the open file descriptors of each process. Default 1024.
	OpenFiles int64 `json:"open_files,omitempty"`
	// CPUs caps the CPU time of the program's tree at this many CPUs (cgroup v2
	// cpu.max) where the cgroup v2 cpu controller is delegated, or (cgroup v1
	// cpu.cfs_quota_us) where a cgroup v1 cpu hierarchy is writable; elsewhere it
	// has no effect. 0 (the default): no cap.
	CPUs float64 `json:"cpus,omitempty"`
}

// Mode is how a contained process tree is held together.
type Mode string

// The modes, strongest first.
const (
	// ModeNamespace: the program is PID 1 of a PID namespace of its own; when it
	// exits, the kernel kills every process of the namespace.
	ModeNamespace Mode = "namespace"
	// ModeCgroup: the program's launcher runs in a cgroup v2 directory of its own,
	// which stopping kills.
	ModeCgroup Mode = "cgroup"
	// ModeSubreaper: the program's launcher is a child subreaper that kills and
	// reaps every descendant when the program ends.
	ModeSubreaper Mode = "subreaper"
	// ModeNone: the program is a plain child in its own process group.
	ModeNone Mode = "none"
)
