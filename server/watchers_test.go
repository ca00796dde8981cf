//go:build unix

package server

import (
	"sync"
	"testing"
)

// TestWatchSetDropsWatcherThatFellBehind checks the contract of broadcastLocked:
// it never blocks, and a watcher whose buffer is full is removed and its dropped
// closed, once, while the other watchers go on getting events.
func TestWatchSetDropsWatcherThatFellBehind(t *testing.T) {
	var mu sync.Mutex
	ws := newWatchSet[*ask, int](&mu)
	h := &handle{}
	item := &ask{id: "ask_1", loc: "L", owner: h}
	slow, _ := ws.add(h, "", nil, nil)
	reader, _ := ws.add(h, "L", nil, nil)
	mu.Lock()
	for i := range watcherBuffer + 2 {
		ws.broadcastLocked(item, i)
		if i < watcherBuffer {
			if got := <-reader.events; got != i {
				t.Fatalf("reader got %d, want %d", got, i)
			}
		}
	}
	_, slowIn := ws.watchers[slow]
	mu.Unlock()
	select {
	case <-slow.dropped:
	default:
		t.Fatal("the watcher that fell behind was not dropped")
	}
	if slowIn {
		t.Fatal("the dropped watcher is still in the set")
	}
	if len(slow.events) != watcherBuffer {
		t.Fatalf("the dropped watcher holds %d events, want %d", len(slow.events), watcherBuffer)
	}
	if got := len(reader.events); got != 2 {
		t.Fatalf("reader holds %d events after the drop, want 2", got)
	}
	ws.remove(slow) // already gone: a no-op
}

// TestWatchSetScope checks that add replays, oldest first, only the pending items
// the new watcher sees, and that watchedLocked and broadcastLocked follow the same
// seenBy rule.
func TestWatchSetScope(t *testing.T) {
	var mu sync.Mutex
	ws := newWatchSet[*ask, string](&mu)
	mine, other := &handle{}, &handle{}
	pending := map[string]*ask{
		"b": {id: "b", seq: 1, loc: "L", owner: mine},
		"a": {id: "a", seq: 2, loc: "L"}, // not attributed: every watcher of L sees it
		"c": {id: "c", seq: 3, loc: "L", owner: other},
		"d": {id: "d", seq: 4, loc: "M", owner: mine},
	}
	w, evs := ws.add(mine, "L", pending, func(a *ask) string { return a.id })
	if got := len(evs); got != 2 || evs[0] != "b" || evs[1] != "a" {
		t.Fatalf("replayed %q, want [b a], the order they became pending in", evs)
	}
	mu.Lock()
	if ws.watchedLocked(pending["c"]) || ws.watchedLocked(pending["d"]) || !ws.watchedLocked(pending["b"]) {
		t.Fatal("watchedLocked does not follow seenBy")
	}
	for _, id := range []string{"a", "b", "c", "d"} {
		ws.broadcastLocked(pending[id], id)
	}
	mu.Unlock()
	if got := len(w.events); got != 2 || <-w.events != "a" || <-w.events != "b" {
		t.Fatalf("broadcast reached the watcher %d times, want a then b", got)
	}
	ws.remove(w)
	mu.Lock()
	defer mu.Unlock()
	if ws.watchedLocked(pending["a"]) {
		t.Fatal("a removed watcher still watches")
	}
}
