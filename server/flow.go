package server

import (
	"fmt"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolhost/toolhost/internal/servepb"
	"github.com/toolhost/toolhost/sdk"
)

// maxHeldProgress bounds the progress events a client handle's SettleStreams hold
// for it while their sends wait for the client to read. A stream holds at most
// one (the latest; see progressSender); a handle whose streams would hold more is
// closed as unread (see unreadError). A send waits only once the client has left
// gRPC's flow-control windows full (a stream's 64 KiB and more unread), so a
// client reading at any pace never comes near it.
const maxHeldProgress = 128

// unreadError is the cause a handle is closed with when its client stopped reading
// its streams.
type unreadError struct {
	id   string
	held int64
}

func (e *unreadError) Error() string {
	return fmt.Sprintf("client handle %s closed: its client did not read %d of its SettleStreams, whose progress the server would have had to keep; "+
		"read every stream you open, then open a new client handle", e.id, e.held)
}

// hold counts up to n more progress events held by h's streams, as many as keep
// them within maxHeldProgress, and returns how many it counted.
func (h *handle) hold(s *Server, n int) int {
	for {
		cur := h.held.Load()
		k := min(int64(n), maxHeldProgress-cur)
		if k <= 0 {
			return 0
		}
		if h.held.CompareAndSwap(cur, cur+k) {
			for m := s.maxHeld.Load(); cur+k > m && !s.maxHeld.CompareAndSwap(m, cur+k); m = s.maxHeld.Load() {
			}
			return int(k)
		}
	}
}

// closedStatus is the status a stream of h ends with once h is closed.
func (h *handle) closedStatus() error {
	h.conn.mu.Lock()
	cause := h.cause
	h.conn.mu.Unlock()
	if u, ok := cause.(*unreadError); ok {
		return status.Error(codes.ResourceExhausted, u.Error())
	}
	return status.Errorf(codes.Canceled, "client handle %s closed", h.id)
}

// maxQueuedProgress bounds the progress events one SettleStream keeps to send.
const maxQueuedProgress = 16

// progressSender sends a call's events on its SettleStream from one goroutine, so
// a slow client never blocks the tool reporting progress, and bounds what it keeps
// for a client that reads slowly or not at all: up to maxQueuedProgress progress
// events, then the latest replaces the newest kept one — the count of events
// replaced or dropped reaches the client in the next event sent (Progress.skipped)
// — and the final event, which is never dropped. The events kept while a send
// waits for the client count against the handle's maxHeldProgress; what the handle
// cannot count is dropped, and the handle closed. Progress is kept ahead of the
// final event.
type progressSender struct {
	s      *Server
	h      *handle
	stream servepb.Toolhost_SettleStreamServer

	mu       sync.Mutex
	queue    []*servepb.Progress  // kept to send, oldest first
	carry    uint64               // events dropped, for the next event's skipped
	heldN    int                  // of queue, counted in h.held
	final    *servepb.SettleEvent // the final event, not sent yet
	finished bool                 // the final event was given: no more progress
	stopped  bool                 // the RPC returns: no more sends
	sending  bool                 // a send is in progress
	started  bool                 // the goroutine runs (from the first event on)
	err      error                // the first send error
	wake     chan struct{}        // set when started
	sent     chan struct{}        // closed when the goroutine has ended
}

func newProgressSender(s *Server, h *handle, stream servepb.Toolhost_SettleStreamServer) *progressSender {
	return &progressSender{s: s, h: h, stream: stream}
}

// push keeps ev to send. It never blocks.
func (p *progressSender) push(ev sdk.Progress) {
	p.mu.Lock()
	if p.finished || p.stopped {
		p.mu.Unlock()
		return
	}
	if !p.started { // most calls report no progress: no goroutine for them
		p.started = true
		p.wake, p.sent = make(chan struct{}, 1), make(chan struct{})
		go p.run()
	}
	pe := &servepb.Progress{Progress: ev.Progress, Total: ev.Total, Message: ev.Message}
	unread := false
	switch {
	case len(p.queue) == maxQueuedProgress: // the latest wins
		last := len(p.queue) - 1
		pe.Skipped = p.queue[last].Skipped + 1
		p.queue[last] = pe
	case p.sending && p.h.hold(p.s, 1) == 0: // the handle holds all it may
		p.carry++
		unread = true
	default:
		if p.sending {
			p.heldN++
		}
		pe.Skipped, p.carry = p.carry, 0
		p.queue = append(p.queue, pe)
	}
	p.mu.Unlock()
	if unread {
		p.h.close(&unreadError{id: p.h.id, held: maxHeldProgress})
		return
	}
	p.poke()
}

func (p *progressSender) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *progressSender) run() {
	defer close(p.sent)
	for {
		p.mu.Lock()
		p.sending = false
		if p.heldN > 0 {
			p.h.held.Add(int64(-p.heldN))
			p.heldN = 0
		}
		if p.stopped || p.err != nil {
			p.mu.Unlock()
			return
		}
		var ev *servepb.SettleEvent
		last := false
		switch {
		case len(p.queue) > 0:
			ev = &servepb.SettleEvent{Event: &servepb.SettleEvent_Progress{Progress: p.queue[0]}}
			p.queue = append(p.queue[:0], p.queue[1:]...)
		case p.final != nil:
			ev, p.final, last = p.final, nil, true
		}
		if ev == nil {
			p.mu.Unlock()
			<-p.wake
			continue
		}
		p.sending = true
		// What stays queued is held while this send waits; what the handle
		// cannot count is dropped (counted in the next event) and it is closed.
		unread := false
		if n := len(p.queue); n > 0 {
			p.heldN = p.h.hold(p.s, n)
			if drop := n - p.heldN; drop > 0 {
				var skipped uint64
				for _, d := range p.queue[:drop] {
					skipped += d.Skipped + 1
				}
				p.queue = append(p.queue[:0], p.queue[drop:]...)
				if len(p.queue) > 0 {
					p.queue[0].Skipped += skipped
				} else {
					p.carry += skipped
				}
				unread = true
			}
		}
		p.mu.Unlock()
		if unread {
			p.h.close(&unreadError{id: p.h.id, held: maxHeldProgress})
		}
		err := p.stream.Send(ev)
		p.mu.Lock()
		if err != nil && p.err == nil {
			p.err = err
		}
		p.mu.Unlock()
		if last {
			return
		}
	}
}

// finish sends final after the progress kept, and returns the RPC's result: nil,
// the send's error, or, when the handle is closed as unread first, a status saying
// so.
func (p *progressSender) finish(final *servepb.SettleEvent) error {
	p.mu.Lock()
	p.finished = true
	if !p.started {
		p.mu.Unlock()
		return p.stream.Send(final)
	}
	p.final = final
	p.mu.Unlock()
	p.poke()
	select {
	case <-p.sent:
	case <-p.h.unread:
		select {
		case <-p.sent:
		default:
			// A send may wait for the client for good; ending the RPC ends it.
			p.stop()
			return p.h.closedStatus()
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// stop ends the sender without waiting for a send in progress: the RPC returns,
// which ends that send.
func (p *progressSender) stop() {
	p.mu.Lock()
	p.stopped = true
	started := p.started
	p.mu.Unlock()
	if started {
		p.poke()
	}
}
