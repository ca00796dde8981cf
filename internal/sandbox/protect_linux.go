package sandbox

import (
	"os"
	"path/filepath"
	"slices"
)

// StateDir is the directory of a Location that holds what gives its sources their
// authority: its config (which makes a plugin trusted, unconfined, allowed), its
// manifest tools (commands), its lock file (which binaries run). A confined program
// never writes one, even inside a Write path: a plugin granted its whole Location
// would otherwise rewrite the config and, at the next reload, run trusted and
// unconfined.
const StateDir = ".toolhost"

// protected lists the state directories (StateDir) a confined program working in
// dir must not write although c.Write reaches them: each one in an ancestor of dir
// (dir itself included: the Location a source works in), and each one directly in
// a Write path (another Location granted whole). Paths are resolved; a state
// directory that is a symbolic link is listed as the link (the program must not
// replace it) and as what it names. Missing ones are not listed: a Write path's
// parent cannot make one appear (see writeAround).
func protected(c *Confinement, dir string) []string {
	var candidates []string
	if dir != "" && filepath.IsAbs(dir) {
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			dir = real
		}
		for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
			candidates = append(candidates, filepath.Join(d, StateDir))
			if d == "/" {
				break
			}
		}
	}
	for _, w := range c.Write {
		if real, err := filepath.EvalSymlinks(w); err == nil {
			candidates = append(candidates, filepath.Join(real, StateDir))
		}
	}
	var out []string
	for _, p := range candidates {
		fi, err := os.Lstat(p)
		if err != nil {
			continue
		}
		ps := []string{p}
		if fi.Mode()&os.ModeSymlink != 0 {
			if real, err := filepath.EvalSymlinks(p); err == nil {
				ps = append(ps, real)
			}
		}
		for _, p := range ps {
			if !slices.Contains(out, p) && slices.ContainsFunc(c.Write, func(w string) bool { return writeReaches(w, p) }) {
				out = append(out, p)
			}
		}
	}
	slices.Sort(out)
	return out
}

// writeReaches reports whether Write path w (as given, or resolved) holds p.
func writeReaches(w, p string) bool {
	if !filepath.IsAbs(w) {
		return false
	}
	if isWithin(p, filepath.Clean(w)) {
		return true
	}
	real, err := filepath.EvalSymlinks(w)
	return err == nil && isWithin(p, real)
}

// writeAround returns Landlock's rules, without a world, for Write paths that hold
// protected paths (a world binds them read-only instead, see worldEntries):
// Landlock grants beneath a path and cannot refuse beneath a grant, so a Write path
// holding a protected one is granted read-only, and so is each directory on the
// way down to it, while every other entry of those directories (as they are at
// the start; not symbolic links, which a rule would follow out of the grant) is
// granted read-write. The program then writes everywhere in the grant but the
// protected paths, and creates nothing new directly in the directories on the way
// to them (it could otherwise move a protected directory aside and make another).
// Write paths that hold none are returned in rw unchanged.
func writeAround(write, protect []string) (ro, rw []string) {
	for _, w := range write {
		inside := within(protect, w)
		if len(inside) == 0 {
			rw = append(rw, w)
			continue
		}
		if real, err := filepath.EvalSymlinks(w); err == nil {
			w = real
		}
		carve(w, inside, &ro, &rw)
	}
	return ro, rw
}

// within returns the paths of ps that Write path w holds.
func within(ps []string, w string) []string {
	var out []string
	for _, p := range ps {
		if writeReaches(w, p) {
			out = append(out, p)
		}
	}
	return out
}

func carve(dir string, protect []string, ro, rw *[]string) {
	*ro = append(*ro, dir)
	if slices.Contains(protect, dir) {
		return
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if !e.IsDir() && !e.Type().IsRegular() {
			continue // a link is not followed out of the grant; sockets, pipes, devices are not written
		}
		if inside := within(protect, p); len(inside) > 0 {
			carve(p, inside, ro, rw)
		} else {
			*rw = append(*rw, p)
		}
	}
}
