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

// hold counts one more progress event held by h's streams, unless they hold
// maxHeldProgress already; it reports whether it did.
func (h *handle) hold(s *Server) bool {
	for {
		n := h.held.Load()
		if n >= maxHeldProgress {
			return false
		}
		if h.held.CompareAndSwap(n, n+1) {
			for m := s.maxHeld.Load(); n+1 > m && !s.maxHeld.CompareAndSwap(m, n+1); m = s.maxHeld.Load() {
			}
			return true
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

// progressSender sends a call's events on its SettleStream from one goroutine, so
// a slow client never blocks the tool reporting progress, and bounds what it keeps
// for a client that reads slowly or not at all: one progress event, the latest —
// a newer one replaces it and is counted, and the next event sent carries the
// count (Progress.skipped) — and the final event, which is never dropped. While a
// send waits for the client, the event it holds counts against its handle's
// maxHeldProgress. Progress is kept ahead of the final event.
type progressSender struct {
	s      *Server
	h      *handle
	stream servepb.Toolhost_SettleStreamServer

	mu       sync.Mutex
	pending  *servepb.Progress    // the latest event not sent yet
	skipped  uint64               // events replaced since the last one sent
	final    *servepb.SettleEvent // the final event, not sent yet
	finished bool                 // the final event was given: no more progress
	stopped  bool                 // the RPC returns: no more sends
	sending  bool                 // a send is in progress
	held     bool                 // pending counts in h.held
	started  bool                 // the goroutine runs (from the first event on)
	err      error                // the first send error
	wake     chan struct{}        // set when started
	sent     chan struct{}        // closed when the goroutine has ended
}

func newProgressSender(s *Server, h *handle, stream servepb.Toolhost_SettleStreamServer) *progressSender {
	return &progressSender{s: s, h: h, stream: stream}
}

// push keeps ev as the latest progress event. It never blocks.
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
	if p.sending && !p.held { // a send waits, and no event is held yet
		if !p.h.hold(p.s) {
			// The handle holds all it may: this event is not kept, and the
			// handle is closed.
			p.skipped++
			p.mu.Unlock()
			p.h.close(&unreadError{id: p.h.id, held: maxHeldProgress})
			return
		}
		p.held = true
	}
	if p.pending != nil {
		p.skipped++
	}
	p.pending = &servepb.Progress{Progress: ev.Progress, Total: ev.Total, Message: ev.Message}
	p.mu.Unlock()
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
		if p.held {
			p.held = false
			p.h.held.Add(-1)
		}
		if p.stopped || p.err != nil {
			p.mu.Unlock()
			return
		}
		var ev *servepb.SettleEvent
		last := false
		switch {
		case p.pending != nil:
			p.pending.Skipped, p.skipped = p.skipped, 0
			ev = &servepb.SettleEvent{Event: &servepb.SettleEvent_Progress{Progress: p.pending}}
			p.pending = nil
		case p.final != nil:
			ev, p.final, last = p.final, nil, true
		}
		if ev == nil {
			p.mu.Unlock()
			<-p.wake
			continue
		}
		p.sending = true
		p.mu.Unlock()
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
// the send's error, or, when the handle closes first (its client stopped reading
// or closed it), a status saying so.
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
	case <-p.h.done:
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
