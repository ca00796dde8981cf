//go:build linux

package sandbox

import (
	"sync"
	"time"
)

// reserveSize is how many resources of a kind (private temporary directories,
// processes cgroups) a host keeps ready for its next confined starts: enough for a
// Location that activates several plugins at once, or a burst of restarts.
const reserveSize = 8

// reserve keeps resources of one kind ready for the next starts, so that a start
// does not pay for making one, nor its end for removing it: making and removing a
// directory or a cgroup costs more than taking one ready, and more again when
// directories come and go by the hundred (the file system scans past the inodes it
// freed recently).
//
// A start takes one (take); when that leaves the reserve empty, one more is made in
// the background. A box gives its resources back once its program and everything
// it started are gone, emptied and reset (put); beyond reserveSize they are
// removed. DropReserves removes what they hold when the host is done; a host
// killed before that leaves it behind, named with its pid, as it leaves what it had
// no time to release: the next host removes it (the dead-host sweeps of tmpdir.go
// and cgroup.go).
type reserve[T any] struct {
	make func() (T, bool) // a new resource; false when it cannot
	drop func(T)          // removes one the reserve has no room for

	mu     sync.Mutex
	ready  []T
	making bool
}

// take returns a ready resource, or ok false when there is none (the caller makes
// its own).
func (r *reserve[T]) take() (v T, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.ready); n > 0 {
		v, ok = r.ready[n-1], true
		r.ready = r.ready[:n-1]
	}
	if len(r.ready) == 0 && !r.making {
		r.making = true
		go r.makeOne()
	}
	return v, ok
}

// makeOne makes a resource and keeps it; making ends with it in the reserve (or
// dropped), so that drain, which waits for making, misses none.
func (r *reserve[T]) makeOne() {
	v, ok := r.make()
	r.mu.Lock()
	r.making = false
	kept := ok && r.keepLocked(v)
	r.mu.Unlock()
	if ok && !kept {
		r.drop(v)
	}
}

// put keeps v for a later take, or drops it when the reserve is full.
func (r *reserve[T]) put(v T) {
	r.mu.Lock()
	kept := r.keepLocked(v)
	r.mu.Unlock()
	if !kept {
		r.drop(v)
	}
}

// keepLocked adds v unless the reserve is full; r.mu is held.
func (r *reserve[T]) keepLocked(v T) bool {
	if len(r.ready) >= reserveSize {
		return false
	}
	r.ready = append(r.ready, v)
	return true
}

// drain drops every resource the reserve holds, after the one being made if any.
func (r *reserve[T]) drain() {
	for {
		r.mu.Lock()
		held, making := r.ready, r.making
		r.ready = nil
		r.mu.Unlock()
		for _, v := range held {
			r.drop(v)
		}
		if !making {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// DropReserves removes the temporary directories, processes and cpu cgroups this
// process keeps ready for confined starts (see reserve). Call it when the host
// stops, once its sources are stopped; a later start makes new ones.
func DropReserves() {
	tempDirs.drain()
	pidsCgroups.drain()
	cpuCgroups.drain()
}
