// Package sandbox contains and confines the processes toolhost starts for its
// sources (plugins, MCP servers, manifest commands).
//
// Containment: every process a source starts, at any depth, ends with the source —
// on stop, and when the host dies by any signal. In a PID namespace the program is
// started as the namespace's init itself, without a launcher; a confined one from a
// host thread confined for it (see Box.startConfined). Otherwise — the cgroup and
// subreaper modes need a supervisor, and where Yama forbids tracing a child the
// limits cannot be set before the program runs — the host re-executes its own binary
// (/proc/self/exe) in a hidden launcher
// mode, detected by this package's init before the rest of the program initializes:
// any binary that links this package (toolhost, a test binary, an embedding runner)
// is a launcher. The launcher applies the confinement on one locked OS thread and
// starts the real program from that thread, then stays as its parent: it forwards
// SIGTERM, SIGINT and SIGHUP to the program's process group, reaps orphans, and exits
// with the program's status. The tree is held together by the strongest mechanism
// the machine allows (see Mode): the launcher as PID 1 of a new PID namespace, a
// cgroup v2 directory killed through cgroup.kill, or the launcher as a child
// subreaper that sweeps its descendants.
//
// Confinement (Spec.Confine): where the kernel allows namespaces (WorldAvailable,
// probed once), a confined program starts in a world of its own, built from
// nothing by the child of one clone3 before its execve (startWorld): new PID,
// mount, IPC and network (unless Network) namespaces, a cgroup namespace rooted at
// its own cgroups, and a user namespace without root; a root of its own holding only its binary, the system's shared files
// (SystemRead), its Read and Write paths and the host's shared directories, four
// devices, its own /proc and a capped tmpfs as TMPDIR (world_linux.go); a new
// session keyring; no descriptor but its own; its limits, no_new_privs, no
// capability, Landlock and a seccomp filter (seccompFilter) as a second layer.
// Nothing of it is on the host's disk or in its mount table.
//
// Elsewhere the confinement is what the thread or launcher applies: no_new_privs,
// resource limits, Landlock (best effort by the kernel's ABI) — the program's
// binary and the system's shared files read-only, a private temporary directory
// (TMPDIR) read-write, no sockets but AF_UNIX (seccomp, and Landlock's TCP rules),
// no abstract unix sockets or signals outside the source's domain — and a network
// namespace. The temporary directory, and the cgroup that caps the program's
// processes, come from a reserve the host keeps (reserve.go): a program finds its
// directory empty and private, and once it and everything it started are gone, the
// directory is emptied and reset for the next one.
//
// A contained program's CPU share is its cgroup's cpu weight where the cgroup v2
// cpu controller is delegated, else its cgroup v1 cpu cgroup's shares where one
// can be made (inside the host's own, joined once the program is busy, see cpuV1
// and watchCPU), else its host's: it runs at the
// host's priority in a process group of its own in the host's session (see
// Box.cpuLayers). Box.Layers names what holds a program; OffEnv turns layers off
// for tests.
//
// SourceOf answers whether a pid belongs to a live contained tree, for peer checks
// on the host's sockets.
package sandbox
