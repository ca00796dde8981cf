package server

import (
	"cmp"
	"slices"
	"sync"
)

// watcherBuffer is how many events a watcher may fall behind before it is
// dropped.
const watcherBuffer = 256

// watchable is a kind of pending item that clients watch: a permission ask or an
// interaction.
type watchable interface {
	// seenBy reports whether a watcher of handle h and Location loc ("" for every
	// Location) may see (and answer) the item.
	seenBy(h *handle, loc string) bool
	// pendingSeq is the order the item became pending in.
	pendingSeq() uint64
}

// watcher is one watch stream (WatchAsks, WatchInteractions) of handle h. Its events
// are those of the items it sees; dropped is closed when it fell behind and was
// removed from its set, after which nothing more is sent on events.
type watcher[E any] struct {
	h       *handle
	loc     string // "" watches every Location
	events  chan E
	dropped chan struct{}
}

// watchSet is the watchers of one kind of pending item I, told of them by events E.
// mu (the Server's mu) guards the set and the pending items, so a new watcher gets
// each pending item either in its replay (add) or in a broadcast, never neither nor
// both.
type watchSet[I watchable, E any] struct {
	mu       *sync.Mutex
	watchers map[*watcher[E]]struct{}
}

// newWatchSet returns an empty set guarded by mu.
func newWatchSet[I watchable, E any](mu *sync.Mutex) *watchSet[I, E] {
	return &watchSet[I, E]{mu: mu, watchers: map[*watcher[E]]struct{}{}}
}

// add registers a watcher of handle h and Location loc ("" for every Location) and
// returns it with the events, made by event, of the items of pending (keyed by id,
// guarded by mu) it sees now, oldest first. It locks mu, and calls event after
// unlocking it.
func (ws *watchSet[I, E]) add(h *handle, loc string, pending map[string]I, event func(I) E) (*watcher[E], []E) {
	w := &watcher[E]{h: h, loc: loc, events: make(chan E, watcherBuffer), dropped: make(chan struct{})}
	ws.mu.Lock()
	ws.watchers[w] = struct{}{}
	var seen []I
	for _, it := range pending {
		if it.seenBy(h, loc) {
			seen = append(seen, it)
		}
	}
	slices.SortFunc(seen, func(a, b I) int { return cmp.Compare(a.pendingSeq(), b.pendingSeq()) })
	ws.mu.Unlock()
	evs := make([]E, len(seen))
	for i, it := range seen {
		evs[i] = event(it)
	}
	return w, evs
}

// remove unregisters w, if it is still registered. It locks mu.
func (ws *watchSet[I, E]) remove(w *watcher[E]) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	delete(ws.watchers, w)
}

// watchedLocked reports whether some watcher sees it. mu is held.
func (ws *watchSet[I, E]) watchedLocked(it I) bool {
	for w := range ws.watchers {
		if it.seenBy(w.h, w.loc) {
			return true
		}
	}
	return false
}

// broadcastLocked sends ev to every watcher that sees it without blocking: a
// watcher whose buffer is full is removed and its dropped closed instead. mu is
// held.
func (ws *watchSet[I, E]) broadcastLocked(it I, ev E) {
	for w := range ws.watchers {
		if !it.seenBy(w.h, w.loc) {
			continue
		}
		select {
		case w.events <- ev:
		default:
			delete(ws.watchers, w)
			close(w.dropped)
		}
	}
}
