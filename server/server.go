package server

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/toolhost/toolhost/internal/servepb"
	"github.com/toolhost/toolhost/location"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/scope"
)

// ErrShutdown is the cancellation cause of calls interrupted because the server is
// shutting down. It wraps context.Canceled.
var ErrShutdown = fmt.Errorf("server: shutting down: %w", context.Canceled)

// errCancelCall is the cause of a call interrupted by CancelCall.
var errCancelCall = fmt.Errorf("server: cancelled by the client (CancelCall): %w", context.Canceled)

// errClientClosed is the cause of a call interrupted because its client handle was
// closed (CloseClient).
var errClientClosed = fmt.Errorf("server: the client handle was closed (CloseClient): %w", context.Canceled)

// errConnClosed is the cause of a call interrupted because its connection ended.
var errConnClosed = fmt.Errorf("server: the client connection closed: %w", context.Canceled)

// MaxMessageBytes bounds one message in either direction: a call's input and a
// settlement (whose text is bounded by the Location's limits, but media parts are
// up to 5 MiB each).
const MaxMessageBytes = 64 << 20

// Options configure a Server.
type Options struct {
	// Registry receives every Location's placement and tools. Required.
	Registry *registry.Registry
	// Location is the template of every activation (Logger, BuildCache, SocketDir,
	// Env, StateDir). Its Registry and Asker are set by the server: asks go to the
	// serve API's WatchAsks streams.
	Location location.Options
	// Logger receives the server's own messages. Default: Location.Logger, else
	// discard.
	Logger hclog.Logger
	// Token, if set, must come with every call as the metadata
	// "authorization: Bearer <Token>" (compared in constant time); other calls fail
	// with Unauthenticated. Required when listening on TCP.
	Token string
	// OnActivate, if set, is called once with each Location the server activates
	// (toolhost dev watches its plugins); the function it returns, if any, is called
	// when the Location is deactivated, before the Location closes.
	OnActivate func(*location.Location) (stop func())
	// MaxRequests bounds the Requests one client handle holds at once; default 4096.
	MaxRequests int
	// MaxCalls bounds the calls (Settle and SettleStream) in flight on the server,
	// every connection's together; default DefaultMaxCalls. A call past it is
	// refused at once with ResourceExhausted naming the limit, never queued.
	MaxCalls int
	// MaxConns bounds the connections the server holds open at once, every
	// listener's together; default DefaultMaxConns. A connection past it is closed
	// as soon as it is accepted (the client sees Unavailable), and logged.
	MaxConns int
}

// DefaultMaxConns is the default of Options.MaxConns.
const DefaultMaxConns = 256

// DefaultMaxCalls is the default of Options.MaxCalls.
const DefaultMaxCalls = 1024

// Server implements the serve API (see internal/servepb/serve.proto) over a set of
// Locations it activates in a child scope of its parent. Create it with New, serve
// listeners with Serve, and end it with Shutdown. Its methods are safe for
// concurrent use.
type Server struct {
	opts Options
	log  hclog.Logger
	root *scope.Scope
	grpc *grpc.Server

	// ctx ends (cause ErrShutdown) when Shutdown begins: every call and watcher ends.
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu         sync.Mutex
	locs       map[string]*locEntry
	activating map[string]*activation
	// closing holds the Locations being deactivated, each with a channel closed
	// once its Close has returned (its registry placement released).
	closing map[string]chan struct{}
	calls   map[callKey]*handle // calls in flight, to attribute asks
	// asks are the permission asks waiting for an answer, and askWatchers the
	// WatchAsks streams.
	asks        map[string]*ask
	askWatchers *watchSet[*ask, *servepb.AskEvent]
	// interactions are the questions and sampling requests of served calls waiting
	// for an answer, and interactionWatchers the WatchInteractions streams.
	interactions        map[string]*interaction
	interactionWatchers *watchSet[*interaction, *servepb.InteractionEvent]
	// pendingSeq numbers asks and interactions as they become pending, so that a
	// new watcher is replayed them in that order.
	pendingSeq uint64

	// maxHeld is the most progress events one handle's streams held at once.
	maxHeld atomic.Int64
	// inFlight counts the calls in flight (Options.MaxCalls).
	inFlight atomic.Int64
	// conns counts the connections open (Options.MaxConns), refused those refused.
	conns, refused atomic.Int64

	shutdownOnce sync.Once
	shutdownErr  error
}

type locEntry struct {
	loc  *location.Location
	stop func()
}

// activation is an activation in progress; others asking for the same directory
// wait for it.
type activation struct {
	done chan struct{}
	loc  *location.Location
	err  error
}

// New returns a Server whose Locations live in a new child scope of parent (closing
// parent deactivates them all). It serves nothing until Serve is called.
func New(parent *scope.Scope, opts Options) (*Server, error) {
	if opts.Registry == nil {
		return nil, errors.New("server: Options.Registry is required")
	}
	if opts.MaxRequests <= 0 {
		opts.MaxRequests = 4096
	}
	if opts.MaxCalls <= 0 {
		opts.MaxCalls = DefaultMaxCalls
	}
	if opts.MaxConns <= 0 {
		opts.MaxConns = DefaultMaxConns
	}
	log := opts.Logger
	if log == nil {
		log = opts.Location.Logger
	}
	if log == nil {
		log = hclog.NewNullLogger()
	}
	root, err := parent.Child()
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	s := &Server{
		opts:       opts,
		log:        log,
		root:       root,
		locs:       map[string]*locEntry{},
		activating: map[string]*activation{},
		closing:    map[string]chan struct{}{},
		calls:      map[callKey]*handle{},
		asks:       map[string]*ask{},

		interactions: map[string]*interaction{},
	}
	s.askWatchers = newWatchSet[*ask, *servepb.AskEvent](&s.mu)
	s.interactionWatchers = newWatchSet[*interaction, *servepb.InteractionEvent](&s.mu)
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	s.grpc = grpc.NewServer(
		grpc.Creds(connCreds{}),
		grpc.ChainUnaryInterceptor(s.unaryGuard),
		grpc.ChainStreamInterceptor(s.streamGuard),
		grpc.MaxRecvMsgSize(MaxMessageBytes),
		grpc.MaxSendMsgSize(MaxMessageBytes),
		// Reused handler goroutines keep the stack a settlement's pipeline grew to
		// (schema validation goes deep): a fresh goroutine per call spent a sixth of
		// a trivial call's CPU copying its stack as it grew. Streams beyond the
		// workers (long calls) still get goroutines of their own.
		grpc.NumStreamWorkers(uint32(4*runtime.GOMAXPROCS(0))),
	)
	servepb.RegisterToolhostServer(s.grpc, &api{s: s})
	return s, nil
}

// ErrTokenRequired is returned by Serve for a TCP listener when Options.Token is
// empty: the serve API is never offered over TCP without a token.
var ErrTokenRequired = errors.New("server: refusing to serve TCP without a token (Options.Token)")

// Serve accepts connections on l until Shutdown. It returns nil after Shutdown, or
// the listener's error. Serve may be called for several listeners. A TCP listener
// needs Options.Token (ErrTokenRequired; l is closed).
func (s *Server) Serve(l net.Listener) error {
	if _, tcp := l.Addr().(*net.TCPAddr); tcp && s.opts.Token == "" {
		l.Close()
		return ErrTokenRequired
	}
	err := s.grpc.Serve(&connLimitListener{Listener: l, s: s})
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// Shutdown stops the server: it stops accepting connections and calls, interrupts
// every call in flight (each Settle stream ends with an `interrupted` event, cause
// ErrShutdown), ends every WatchAsks stream, waits for the handlers to return (until
// ctx ends, then closes the connections), and deactivates every Location (so every
// plugin process is gone when it returns, killed after its grace at the latest).
// Idempotent; later calls return the first one's result.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutdownOnce.Do(func() { s.shutdownErr = s.shutdown(ctx) })
	return s.shutdownErr
}

func (s *Server) shutdown(ctx context.Context) error {
	s.cancel(ErrShutdown)
	stopped := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-ctx.Done():
		s.grpc.Stop()
		<-stopped
	}
	s.mu.Lock()
	var stops []func()
	for _, e := range s.locs {
		if e.stop != nil {
			stops = append(stops, e.stop)
		}
	}
	s.locs = map[string]*locEntry{}
	s.mu.Unlock()
	for _, stop := range stops {
		stop()
	}
	if err := s.root.Close(ctx); err != nil {
		return fmt.Errorf("server: deactivate: %w", err)
	}
	return nil
}

// Activate activates the Location at dir (see location.Activate), or returns the
// active one for the same directory with already set. Concurrent activations of one
// directory share the first one's work. An activation of a Location being
// deactivated waits until it has closed, then activates it anew. ctx bounds the
// activation and that wait.
func (s *Server) Activate(ctx context.Context, dir string) (loc *location.Location, already bool, err error) {
	id, err := location.Canonicalize(dir)
	if err != nil {
		return nil, false, err
	}
	for {
		s.mu.Lock()
		if s.ctx.Err() != nil {
			s.mu.Unlock()
			return nil, false, ErrShutdown
		}
		if e, ok := s.locs[id]; ok {
			s.mu.Unlock()
			return e.loc, true, nil
		}
		if done, ok := s.closing[id]; ok {
			s.mu.Unlock()
			// Another client is deactivating it: activate once its close is done.
			select {
			case <-done:
				continue
			case <-ctx.Done():
				return nil, false, fmt.Errorf("server: location %q is closing; activate it again once it has closed: %w", id, context.Cause(ctx))
			}
		}
		if a, ok := s.activating[id]; ok {
			s.mu.Unlock()
			select {
			case <-a.done:
			case <-ctx.Done():
				return nil, false, context.Cause(ctx)
			}
			if a.err == nil {
				return a.loc, true, nil
			}
			continue // the other activation failed: try ours
		}
		a := &activation{done: make(chan struct{})}
		s.activating[id] = a
		s.mu.Unlock()

		a.loc, a.err = s.activate(ctx, id)
		s.mu.Lock()
		delete(s.activating, id)
		s.mu.Unlock()
		close(a.done)
		return a.loc, false, a.err
	}
}

func (s *Server) activate(ctx context.Context, id string) (*location.Location, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(s.ctx, func() { cancel(ErrShutdown) })
	defer stop()

	opts := s.opts.Location
	opts.Registry = s.opts.Registry
	opts.Asker = &locAsker{s: s, loc: id}
	loc, err := location.Activate(ctx, s.root, id, opts)
	if err != nil {
		return nil, err
	}
	e := &locEntry{loc: loc}
	if s.opts.OnActivate != nil {
		e.stop = s.opts.OnActivate(loc)
	}
	s.mu.Lock()
	if s.ctx.Err() != nil { // shutdown began meanwhile: its sweep may have missed us
		s.mu.Unlock()
		if e.stop != nil {
			e.stop()
		}
		_ = loc.Close(context.WithoutCancel(ctx))
		return nil, ErrShutdown
	}
	s.locs[id] = e
	s.mu.Unlock()
	s.log.Info("location activated", "location", id)
	return loc, nil
}

// Deactivate closes the active Location id (see location.Location.Close). It fails
// with ErrUnknownLocation when id is not active.
func (s *Server) Deactivate(ctx context.Context, id string) error {
	s.mu.Lock()
	e, ok := s.locs[id]
	delete(s.locs, id)
	closed := make(chan struct{})
	if ok {
		s.closing[id] = closed
	}
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownLocation, id)
	}
	defer func() {
		s.mu.Lock()
		delete(s.closing, id)
		s.mu.Unlock()
		close(closed)
	}()
	if e.stop != nil {
		e.stop()
	}
	err := e.loc.Close(ctx)
	s.log.Info("location deactivated", "location", id)
	return err
}

// ErrUnknownLocation is returned for a Location id that is not active.
var ErrUnknownLocation = errors.New("server: no such active location")

// Locations returns the active Locations, sorted by id.
func (s *Server) Locations() []*location.Location {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*location.Location, 0, len(s.locs))
	for _, e := range s.locs {
		out = append(out, e.loc)
	}
	slices.SortFunc(out, func(a, b *location.Location) int { return strings.Compare(a.ID(), b.ID()) })
	return out
}

func (s *Server) location(id string) (*location.Location, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.locs[id]; ok {
		return e.loc, nil
	}
	if !filepath.IsAbs(id) {
		return nil, status.Errorf(codes.NotFound, "no active location %q (location ids are absolute directories; see ListLocations)", id)
	}
	return nil, status.Errorf(codes.NotFound, "no active location %q", id)
}

// newID returns a random id with prefix.
func newID(prefix string) string { return prefix + rand.Text() }

// unaryGuard and streamGuard check the token and refuse calls once shutting down.
func (s *Server) unaryGuard(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := s.admit(ctx); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (s *Server) streamGuard(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := s.admit(ss.Context()); err != nil {
		return err
	}
	return h(srv, ss)
}

func (s *Server) admit(ctx context.Context) error {
	if s.opts.Token != "" && !s.authorized(ctx) {
		return status.Error(codes.Unauthenticated, "missing or wrong token: send the metadata \"authorization: Bearer <token>\" with the token from serve's token file")
	}
	if s.ctx.Err() != nil {
		return status.Error(codes.Unavailable, "toolhost serve is shutting down")
	}
	return nil
}

func (s *Server) authorized(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	want := []byte("Bearer " + s.opts.Token)
	ok := false
	for _, v := range md.Get("authorization") {
		// Every value is compared, in constant time, so timing tells nothing.
		if subtle.ConstantTimeCompare([]byte(v), want) == 1 {
			ok = true
		}
	}
	return ok
}

// connLimitListener holds the server to Options.MaxConns connections, every
// listener's together: a connection past it is closed at once. Each gRPC
// connection has goroutines and buffers of its own from the moment it is accepted
// (one that never speaks is held for gRPC's 120 s handshake timeout).
type connLimitListener struct {
	net.Listener
	s *Server
}

func (l *connLimitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if n := l.s.conns.Add(1); n <= int64(l.s.opts.MaxConns) {
			return &countedConn{Conn: c, s: l.s}, nil
		}
		l.s.conns.Add(-1)
		c.Close()
		// Logged at the first refusal and at each power of two after it, so a
		// client that keeps trying cannot flood the log.
		if r := l.s.refused.Add(1); r&(r-1) == 0 {
			l.s.log.Warn("refused a connection: toolhost serve holds the most connections it may (Options.MaxConns); clients should share a connection",
				"max_conns", l.s.opts.MaxConns, "refused", r)
		}
	}
}

// countedConn gives its slot back when it is closed.
type countedConn struct {
	net.Conn
	s    *Server
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.s.conns.Add(-1) })
	return c.Conn.Close()
}
