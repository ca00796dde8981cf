//go:build linux

package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/landlock-lsm/go-landlock/landlock"
	"golang.org/x/sys/unix"
)

// LandlockABI returns the kernel's Landlock ABI version, 0 when Landlock is not
// available. Probed once.
func LandlockABI() int {
	abiOnce.Do(func() {
		v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
		if errno == 0 {
			abi = int(v)
		}
	})
	if landlockDisabled || Off("landlock") {
		return 0
	}
	return abi
}

var (
	abiOnce sync.Once
	abi     int
	// landlockDisabled makes LandlockABI report 0 (tests).
	landlockDisabled bool
)

// restrict applies c to the calling OS thread (locked by the caller), which the
// program it then starts inherits. go-landlock builds the ruleset, downgraded to the
// kernel's ABI; the ruleset is applied with a plain landlock_restrict_self on this
// thread rather than go-landlock's Restrict, whose all-threads path goes through psx
// (cgo, signals to every thread): the launcher's other threads only run the Go
// runtime and never touch the program's files.
func restrict(program string, c *Confinement) error {
	fd, flags, err := ruleset(program, c)
	if err != nil || fd < 0 {
		return err
	}
	defer unix.Close(fd)
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(fd), uintptr(flags), 0); errno != 0 {
		return fmt.Errorf("landlock_restrict_self: %w", errno)
	}
	return nil
}

// ruleset builds the Landlock ruleset of c for program (close-on-exec), downgraded
// to the kernel's ABI, with the flags for landlock_restrict_self; fd -1 when the
// kernel can restrict nothing.
func ruleset(program string, c *Confinement) (fd int, flags uint32, err error) {
	cfg := landlock.V11.BestEffort()
	if c.Network {
		cfg.HandledAccessNet = 0
	}
	var rules []landlock.Rule
	add := func(paths []string, dirs, files func(...string) landlock.FSRule) {
		var ds, fs []string
		for _, p := range paths {
			switch kindOf(p) {
			case pathDir:
				ds = append(ds, p)
			case pathFile:
				fs = append(fs, p)
			} // a missing path grants nothing; a covered one has its directory's rule
		}
		if len(ds) > 0 {
			rules = append(rules, dirs(ds...).WithResolveUnix())
		}
		if len(fs) > 0 {
			rules = append(rules, files(fs...))
		}
	}
	add(append([]string{program}, c.Read...), landlock.RODirs, landlock.ROFiles)
	add(c.Write, landlock.RWDirs, landlock.RWFiles)
	fd, flags, err = cfg.NewRulesetFD(rules...)
	if err != nil {
		return -1, 0, fmt.Errorf("landlock ruleset: %w", err)
	}
	return fd, flags, nil
}

// landlockWriteAccess is what go-landlock's RWDirs grants at the kernel's ABI
// (every file system right of ABI 1, and truncate from ABI 3; neither refer nor
// ioctl_dev), for a rule the host adds by raw system call.
func landlockWriteAccess() uint64 {
	access := uint64(1<<13 - 1) // execute ... make_sym
	if LandlockABI() >= 3 {
		access |= 1 << 14 // truncate
	}
	return access
}

type pathKind int8

const (
	pathMissing pathKind = iota
	pathFile
	pathDir
	// pathCovered is a system path beneath another system directory once its
	// symbolic links are resolved (/lib and /bin on a merged /usr, /etc/localtime,
	// /usr/share/zoneinfo): that directory's rule already grants it, so it gets no
	// rule of its own (each rule costs the confined start a path walk).
	pathCovered
)

// kindOf says whether p is a directory, another file, missing, or (for a system
// path) covered by another. The system's paths (SystemRead) are looked at once per
// process.
func kindOf(p string) pathKind {
	if k, ok := systemKinds()[p]; ok {
		return k
	}
	return statKind(p)
}

func statKind(p string) pathKind {
	fi, err := os.Stat(p)
	switch {
	case err != nil:
		return pathMissing
	case fi.IsDir():
		return pathDir
	}
	return pathFile
}

var systemKinds = sync.OnceValue(func() map[string]pathKind { return pathKinds(SystemRead) })

// pathKinds looks at each of paths, and marks pathCovered those beneath another
// directory of paths once symbolic links are resolved.
func pathKinds(paths []string) map[string]pathKind {
	m := make(map[string]pathKind, len(paths))
	resolved := make(map[string]string, len(paths))
	for _, p := range paths {
		if m[p] = statKind(p); m[p] != pathMissing {
			if r, err := filepath.EvalSymlinks(p); err == nil {
				resolved[p] = r
			}
		}
	}
	for _, p := range paths {
		r, ok := resolved[p]
		if !ok {
			continue
		}
		for _, q := range paths {
			// Of two paths to one directory, the first by name keeps its rule.
			if rq, ok := resolved[q]; ok && q != p && m[q] == pathDir && (r != rq || q < p) && isWithin(r, rq) {
				m[p] = pathCovered
				break
			}
		}
	}
	return m
}

// isWithin reports whether p is dir or beneath it (both clean and absolute).
func isWithin(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/") || dir == "/"
}
