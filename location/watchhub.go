package location

import (
	"sync"

	"github.com/fsnotify/fsnotify"
)

// configWatches is the one file watcher (one inotify instance on Linux) that the
// config watches of every active Location of the process share. A watcher per
// Location spent one of the user's inotify instances each (128 by default, for
// every program of the user together): past that, a Location's edits were never
// applied, with a warning in the log as the only sign.
var configWatches watchHub

// watchHub multiplexes one fsnotify.Watcher among config watches. It watches the
// union of their directories, each counted once per watch that asked for it and
// removed when the last one closes; the watcher itself is closed with the last
// watch, and made again for the next. Safe for concurrent use.
type watchHub struct {
	mu      sync.Mutex
	w       *fsnotify.Watcher // nil while no watch is open
	stopped chan struct{}     // closed once w's reader has returned
	refs    map[string]int    // directory → the open watches that asked for it
	subs    map[*configWatch]struct{}
}

// configWatch is one subscriber of the hub: it learns, through changed, that an
// event its filter found relevant happened (or that events were lost).
type configWatch struct {
	hub  *watchHub
	dirs []string
	// filter says whether an event on path is relevant, and whether dirs must be
	// watched again (a directory among them was made: it may hold others). It
	// runs on the hub's reader with the hub's lock held: quick, and taking no lock
	// that is held while calling the hub.
	filter func(path string, op fsnotify.Op) (relevant, rewatch bool)
	// changed holds one token when a relevant event (or lost events) came since
	// the subscriber last received: events coalesce, none blocks the hub.
	changed chan struct{}
	mu      sync.Mutex
	err     error // the last watcher error since Err was called
}

// watch opens a config watch of dirs (those that do not exist yet are watched
// once filter asks for a rewatch). Close it.
func (h *watchHub) watch(dirs []string, filter func(string, fsnotify.Op) (bool, bool)) (*configWatch, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.w == nil {
		w, err := fsnotify.NewWatcher()
		if err != nil {
			return nil, err
		}
		h.w, h.stopped = w, make(chan struct{})
		h.refs, h.subs = map[string]int{}, map[*configWatch]struct{}{}
		go h.run(w, h.stopped)
	}
	cw := &configWatch{hub: h, dirs: dirs, filter: filter, changed: make(chan struct{}, 1)}
	for _, d := range dirs {
		h.refs[d]++
		_ = h.w.Add(d)
	}
	h.subs[cw] = struct{}{}
	return cw, nil
}

// Close ends the watch: its directories no other watch asked for are no longer
// watched, and the last watch closes the watcher and waits for its reader. It is
// not idempotent.
func (cw *configWatch) Close() {
	h := cw.hub
	h.mu.Lock()
	delete(h.subs, cw)
	for _, d := range cw.dirs {
		if h.refs[d]--; h.refs[d] <= 0 {
			delete(h.refs, d)
			_ = h.w.Remove(d) // gone already when the directory went
		}
	}
	var w *fsnotify.Watcher
	var stopped chan struct{}
	if len(h.subs) == 0 {
		w, stopped, h.w = h.w, h.stopped, nil
	}
	h.mu.Unlock()
	if w != nil {
		w.Close()
		<-stopped
	}
}

// Err returns the watcher's last error since the previous call (events lost to
// an overflow, an error reading them), or nil.
func (cw *configWatch) Err() error {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	err := cw.err
	cw.err = nil
	return err
}

func (cw *configWatch) notify() {
	select {
	case cw.changed <- struct{}{}:
	default: // one is pending: the subscriber has yet to look
	}
}

// run reads w's events until w closes, telling each watch of those it finds
// relevant, and every watch of an error (events may have been lost: each reads
// its files again).
func (h *watchHub) run(w *fsnotify.Watcher, stopped chan struct{}) {
	defer close(stopped)
	for {
		select {
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			h.mu.Lock()
			for cw := range h.subs {
				relevant, rewatch := cw.filter(ev.Name, ev.Op)
				if rewatch {
					for _, d := range cw.dirs {
						_ = w.Add(d)
					}
				}
				if relevant {
					cw.notify()
				}
			}
			h.mu.Unlock()
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			h.mu.Lock()
			for cw := range h.subs {
				cw.mu.Lock()
				cw.err = err
				cw.mu.Unlock()
				cw.notify()
			}
			h.mu.Unlock()
		}
	}
}
