package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// A confined program's world: the file system, network, IPC and keyring it
// starts in (see startWorld). Its root is a fresh tmpfs, read-only once built,
// that holds only what this file lists:
//
//   - the system's shared files (SystemRead, the same paths Landlock allows), bound
//     read-only at their own paths; a symbolic link among them (/lib on a merged
//     /usr, /etc/localtime) is the same link in the world;
//   - the program's binary, bound read-only;
//   - the Confinement's Read paths read-only and its Write paths (and the
//     directories the host shares, a plugin's socket directory) read-write, but
//     for the Locations' state directories they hold (protected), bound
//     read-only over them: a mount point, neither written nor moved aside;
//   - worldDevices, bound one by one;
//   - /tmp, a fresh tmpfs of its own capped at Confinement.TmpBytes and
//     TmpFiles, set as TMPDIR;
//   - /proc, a fresh procfs of the program's own PID namespace (only its own
//     processes; where the kernel allows, without the system's files: subset=pid);
//   - the program's working directory, empty, when nothing above holds it.
//
// Every mount is nosuid and nodev (the devices: nosuid, noexec). The world exists
// only in the program's mount namespace: when its last process is gone, the kernel
// drops it, and nothing of it is on the host's disk.

// worldDevices are the device files a confined program finds in its /dev (and
// /dev/fd, /dev/stdin, /dev/stdout, /dev/stderr, links into /proc/self/fd).
var worldDevices = []string{"/dev/null", "/dev/zero", "/dev/urandom", "/dev/random"}

// worldNetworkFiles are the system files a program with Network sees besides
// SystemRead: what name resolution reads.
var worldNetworkFiles = []string{"/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/host.conf", "/etc/gai.conf", "/etc/services", "/etc/protocols"}

// worldTmp is TMPDIR in every world.
const worldTmp = "/tmp"

type entryKind int8

const (
	entryDir    entryKind = iota // a directory made in the root tmpfs
	entryBind                    // a directory or file bound from the host
	entryLink                    // a symbolic link
	entryTmpfs                   // the program's TMPDIR
	entryProc                    // a fresh procfs
	entryDevice                  // a device bound from the host
)

// worldEntry is one thing in a world's root, at target.
type worldEntry struct {
	target string
	kind   entryKind
	source string // entryBind, entryDevice: the host path; entryLink: the link's text
	file   bool   // entryBind, entryDevice: a file, not a directory
	write  bool   // entryBind, entryDevice: read-write
	// over marks a read-only bind of a protected path (see protected) over what a
	// read-write bind of a Write path shows: never left out as covered.
	over bool
}

// worldEntries lists what a world holds, in the order it is built (parents first),
// without what an entry already holds (a path beneath a bound directory that grants
// at least as much). dir is the program's working directory.
func worldEntries(program string, c *Confinement, extraWrite []string, dir string) []worldEntry {
	var es []worldEntry
	es = append(es, systemEntries()...)
	if c.Network {
		for _, p := range worldNetworkFiles {
			es = append(es, hostEntries(p, false)...)
		}
	}
	es = append(es, hostEntries(program, false)...)
	for _, p := range c.Read {
		es = append(es, hostEntries(p, false)...)
	}
	for _, p := range append(slices.Clone(extraWrite), c.Write...) {
		es = append(es, hostEntries(p, true)...)
	}
	for _, p := range protected(c, dir) {
		if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
			es = append(es, worldEntry{target: p, kind: entryBind, source: p, over: true})
		}
	}
	for _, d := range worldDevices {
		if fi, err := os.Stat(d); err == nil && fi.Mode()&fs.ModeDevice != 0 {
			es = append(es, worldEntry{target: d, kind: entryDevice, source: d, file: true, write: d == "/dev/null"})
		}
	}
	for _, l := range [][2]string{{"/dev/fd", "/proc/self/fd"}, {"/dev/stdin", "/proc/self/fd/0"}, {"/dev/stdout", "/proc/self/fd/1"}, {"/dev/stderr", "/proc/self/fd/2"}} {
		es = append(es, worldEntry{target: l[0], kind: entryLink, source: l[1]})
	}
	es = append(es, worldEntry{target: worldTmp, kind: entryTmpfs}, worldEntry{target: "/proc", kind: entryProc})
	// Parents first: a path sorts after every prefix of it. Of two entries at one
	// path, TMPDIR and the system's come first (a bind over them wins).
	slices.SortStableFunc(es, func(a, b worldEntry) int { return strings.Compare(a.target, b.target) })

	var out []worldEntry
	for _, e := range es {
		if worldCovers(out, e) || e.kind == entryLink && beneathLink(es, e.target) {
			continue
		}
		out = append(out, e)
	}
	if dir != "" && filepath.IsAbs(dir) {
		dir = filepath.Clean(dir)
		if !hostHas(out, dir) && !slices.ContainsFunc(out, func(e worldEntry) bool { return e.target == dir && !e.file }) {
			out = append(out, worldEntry{target: dir, kind: entryDir})
		}
	}
	return out
}

// worldCovers reports whether an entry of es already holds e: a bound directory
// that is e's target or an ancestor of it and grants at least e's access, or an
// entry at the same path that e would only repeat.
func worldCovers(es []worldEntry, e worldEntry) bool {
	for _, o := range es {
		if o.target == e.target && o.kind == e.kind && o.source == e.source && (o.write || !e.write) {
			return true
		}
		if e.over {
			continue
		}
		if o.kind == entryBind && !o.file && o.target != e.target && isWithin(e.target, o.target) {
			if e.kind == entryLink || e.kind == entryDir {
				return true // the host's own file is there
			}
			if e.kind == entryBind && (o.write || !e.write) {
				return true
			}
		}
	}
	return false
}

// beneathLink reports whether a proper ancestor of p is a link of es: p cannot be
// made there, and what it names is seen through that link (/bin/true beneath
// /bin -> usr/bin).
func beneathLink(es []worldEntry, p string) bool {
	for _, e := range es {
		if e.kind == entryLink && e.target != p && isWithin(p, e.target) {
			return true
		}
	}
	return false
}

// hostEntries are the entries that show host path p in a world: a bind of what it
// resolves to, at its resolved path, and a symbolic link at p when p differs (a
// link itself, or beneath one). A missing path shows nothing.
func hostEntries(p string, write bool) []worldEntry {
	if !filepath.IsAbs(p) {
		return nil
	}
	p = filepath.Clean(p)
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return nil
	}
	fi, err := os.Stat(real)
	if err != nil || !fi.IsDir() && !fi.Mode().IsRegular() && fi.Mode()&fs.ModeSocket == 0 {
		return nil
	}
	es := []worldEntry{{target: real, kind: entryBind, source: real, file: !fi.IsDir(), write: write}}
	if real != p {
		es = append(es, worldEntry{target: p, kind: entryLink, source: real})
	}
	return es
}

// systemEntries are the entries of SystemRead but its devices (worldDevices):
// directories and files bound read-only, links as links. Looked at once.
var systemEntries = sync.OnceValue(func() []worldEntry {
	var es []worldEntry
	for _, p := range SystemRead {
		if strings.HasPrefix(p, "/dev/") {
			continue
		}
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
		case fi.Mode()&fs.ModeSymlink != 0:
			if text, err := os.Readlink(p); err == nil {
				es = append(es, worldEntry{target: p, kind: entryLink, source: text})
			}
		case fi.IsDir() || fi.Mode().IsRegular():
			es = append(es, worldEntry{target: p, kind: entryBind, source: p, file: !fi.IsDir()})
		}
	}
	return es
})

// worldBase is the host directory the new root is first mounted on, in the
// program's mount namespace only, before it becomes the root: the first of a few
// that every system has that is a real directory.
var worldBase = sync.OnceValue(func() string {
	for _, d := range []string{"/tmp", "/mnt", "/var/tmp", "/run"} {
		if fi, err := os.Lstat(d); err == nil && fi.IsDir() {
			return d
		}
	}
	return ""
})

// describeEntry names an entry for an error.
func describeEntry(e worldEntry) string {
	switch e.kind {
	case entryBind, entryDevice:
		how := "read-only"
		if e.write {
			how = "read-write"
		}
		return fmt.Sprintf("bind %s (%s)", e.target, how)
	case entryLink:
		return fmt.Sprintf("link %s -> %s", e.target, e.source)
	case entryTmpfs:
		return "mount the tmpfs of TMPDIR at " + e.target
	case entryProc:
		return "mount /proc"
	}
	return "make directory " + e.target
}

// worldState is what the probe found: whether worlds can be built here, and why
// not.
var worldState struct {
	once   sync.Once
	ok     bool
	reason string
}

// worldDisabled makes WorldAvailable report false, as where the kernel refuses
// the namespaces (tests).
var worldDisabled bool

// WorldAvailable reports whether confined programs start in a world of their own
// here (see startWorld), and if not, why. Probed once per process: a child is
// cloned into new namespaces, builds a small world, and exits.
func WorldAvailable() (bool, string) {
	if worldDisabled || Off("world") {
		return false, "turned off (" + OffEnv + ")"
	}
	worldState.once.Do(func() {
		err := probeWorld()
		worldState.ok = err == nil
		if err != nil {
			worldState.reason = err.Error()
		}
	})
	return worldState.ok, worldState.reason
}

// errWorldRefused marks a failure to build a world that the kernel's refusal of
// a namespace or mount explains.
var errWorldRefused = errors.New("the kernel refuses")

func isRefusal(errno syscall.Errno) bool {
	return errno == unix.EPERM || errno == unix.EINVAL || errno == unix.ENOSYS || errno == unix.EACCES || errno == unix.EOPNOTSUPP
}
