//go:build linux

package sandbox

import (
	"fmt"
	"os"
	"strings"
	"sync"
)

// live holds the started, not yet released boxes.
var live struct {
	sync.Mutex
	boxes map[*Box]struct{}
}

func track(b *Box) {
	live.Lock()
	defer live.Unlock()
	if live.boxes == nil {
		live.boxes = map[*Box]struct{}{}
	}
	live.boxes[b] = struct{}{}
}

func untrack(b *Box) {
	live.Lock()
	defer live.Unlock()
	delete(live.boxes, b)
}

// SourceOf reports whether pid (as this process's PID namespace sees it, which is
// how SO_PEERCRED reports a peer) belongs to the process tree of a live contained
// source, and that source's name. Safe for concurrent use.
func SourceOf(pid int) (name string, ok bool) {
	live.Lock()
	boxes := make([]*Box, 0, len(live.boxes))
	for b := range live.boxes {
		boxes = append(boxes, b)
	}
	live.Unlock()
	var p procInfo
	for _, b := range boxes {
		if b.contains(pid, &p) {
			return b.spec.Name, true
		}
	}
	return "", false
}

// Contains reports whether pid belongs to the box's process tree (the launcher, the
// program and every descendant, however detached).
func (b *Box) Contains(pid int) bool {
	var p procInfo
	return b.contains(pid, &p)
}

// procInfo caches what contains reads of one pid across boxes.
type procInfo struct {
	ns, cgroup *string // nil until read
}

func (b *Box) contains(pid int, p *procInfo) bool {
	root := b.PID()
	if root == 0 || pid <= 0 {
		return false
	}
	if pid == root {
		return true
	}
	switch b.mode {
	case ModeNamespace:
		if p.ns == nil {
			s, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
			p.ns = &s
		}
		return b.nsID != "" && *p.ns == b.nsID
	case ModeCgroup:
		if p.cgroup == nil {
			s := cgroupOf(pid)
			p.cgroup = &s
		}
		return *p.cgroup != "" && strings.HasSuffix(b.cgroup, *p.cgroup) && strings.HasSuffix(*p.cgroup, "/"+lastElem(b.cgroup))
	default:
		// Subreaper and none: every orphan of the tree is reparented to the
		// launcher, so the tree is the launcher's descendants, at any depth (a
		// bound on the walk would let a process below it pass for the host's).
		return inTree(pid, root)
	}
}

func lastElem(p string) string {
	return p[strings.LastIndexByte(p, '/')+1:]
}
