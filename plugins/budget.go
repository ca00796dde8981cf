package plugins

import (
	"context"
	"path"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/proto"

	"github.com/toolhost/toolhost/internal/pluginpb"
)

// budget is the one byte budget of a plugin instance: the bytes of the messages the
// plugin sent the host that the host holds at once (registrations being registered,
// asks and samples being answered, call results being collected and handed on).
// Every connection between the host and the plugin goes through it, so no
// capability can forget it:
//   - each capability server the host serves the plugin is made by
//     Instance.capabilityServer, whose tap reserves a message's largest size before
//     the message is read (a call the budget has no room for is refused unread) and
//     whose interceptor keeps only the message's own size once it is decoded, until
//     the call ends;
//   - the host's connection to the plugin is dialled with the budget's interceptors
//     (dialOptions): each reply (of heldReplyBytes or more) and streamed event is
//     counted when received and held until the call's context ends (every call of
//     the host's has a context that ends when the call returns). The one past the
//     budget fails the call.
//
// The plugin's log lines have a budget of their own (internal/loglimit).
type budget struct {
	max  int64
	held atomic.Int64
}

// defaultMaxHeldBytes is what a plugin may make the host hold besides the two
// registrations it may have received at a time (Config.MaxHeldBytes).
const defaultMaxHeldBytes = 64 << 20

// heldLimit is the budget of a plugin with config c: c.MaxHeldBytes, by default
// maxRegistrations registrations of the largest size and defaultMaxHeldBytes.
func heldLimit(c Config) int64 {
	if c.MaxHeldBytes > 0 {
		return c.MaxHeldBytes
	}
	return maxRegistrations*int64(registerMessageLimit(c.Limits)) + defaultMaxHeldBytes
}

func newBudget(max int64) *budget { return &budget{max: max} }

// take counts n more bytes held, or refuses them, the count unchanged, with a
// ResourceExhausted status naming the limit; what and method say what the bytes
// are. The plugin is named by whoever reports the refusal (the plugin's own call,
// or callError).
func (b *budget) take(n int64, what, method string) error {
	if held := b.held.Add(n); held > b.max {
		b.held.Add(-n)
		return status.Errorf(codes.ResourceExhausted,
			"%s %s would make the host hold %d bytes the plugin sent, over its limit max_held_bytes of %d; the host refused it (raise max_held_bytes in the plugin's entry of the Location config if its results are this large)",
			what, path.Base(method), held, b.max)
	}
	return nil
}

func (b *budget) give(n int64) { b.held.Add(-n) }

// messageLimit is the largest message a server with its own limit own takes from the
// plugin: own, but never more than the whole budget (a message that could never be
// held is refused from its length prefix).
func (b *budget) messageLimit(own int) int {
	return int(min(int64(own), b.max))
}

// sizeOf is the encoded size of a protocol message.
func sizeOf(m any) int64 {
	switch m := m.(type) {
	case interface{ SizeVT() int }:
		return int64(m.SizeVT())
	case proto.Message:
		return int64(proto.Size(m))
	}
	return 0
}

// reservation is what a capability call holds of the budget: the largest message
// until its message is decoded, then the message's size, until the call ends.
type reservation struct {
	b *budget
	n atomic.Int64
}

type reservationKey struct{}

// reserve takes limit bytes for a call's message, before the message is read.
func (b *budget) reserve(method string, limit int) (*reservation, error) {
	if err := b.take(int64(limit), "a call to", method); err != nil {
		return nil, err
	}
	r := &reservation{b: b}
	r.n.Store(int64(limit))
	return r, nil
}

// release gives back what r holds; it may be called more than once.
func (r *reservation) release() { r.b.give(r.n.Swap(0)) }

// keepDecoded is the capability servers' interceptor: of the reservation, it keeps
// the decoded message's size.
func (b *budget) keepDecoded(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if r, ok := ctx.Value(reservationKey{}).(*reservation); ok {
		n := sizeOf(req)
		for {
			old := r.n.Load()
			if old <= n { // released already, or the message fills it
				break
			}
			if r.n.CompareAndSwap(old, n) {
				b.give(old - n)
				break
			}
		}
	}
	return handler(ctx, req)
}

// dialOptions are the budget's interceptors on the host's connection to the plugin.
func (b *budget) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(b.unaryReply),
		grpc.WithChainStreamInterceptor(b.streamEvents),
	}
}

// holdUntil counts n bytes until ctx ends.
func (b *budget) holdUntil(ctx context.Context, n int64, method string) error {
	if err := b.take(n, "the reply to", method); err != nil {
		return err
	}
	context.AfterFunc(ctx, func() { b.give(n) })
	return nil
}

// heldReplyBytes is the size from which a unary reply is held until its call's
// context ends; a smaller one is only checked against the budget (what is left of
// it must have room for the reply), which costs the call path no allocation.
const heldReplyBytes = 64 << 10

func (b *budget) unaryReply(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if err := invoker(ctx, method, req, reply, cc, opts...); err != nil {
		return err
	}
	n := sizeOf(reply)
	if n >= heldReplyBytes {
		return b.holdUntil(ctx, n, method)
	}
	if err := b.take(n, "the reply to", path.Base(method)); err != nil {
		return err
	}
	b.give(n)
	return nil
}

func (b *budget) streamEvents(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	h := &heldStream{ClientStream: s, ctx: ctx, b: b, method: method}
	context.AfterFunc(ctx, func() { b.give(h.held.Swap(0)) })
	return h, nil
}

// heldStream counts each message received on a stream until the stream's context
// ends; a progress event, which the host passes on and does not keep, only while it
// is received.
type heldStream struct {
	grpc.ClientStream
	ctx    context.Context
	b      *budget
	method string
	held   atomic.Int64
}

func (s *heldStream) RecvMsg(m any) error {
	if err := s.ClientStream.RecvMsg(m); err != nil {
		return err
	}
	n := sizeOf(m)
	if err := s.b.take(n, "a message of the result of", s.method); err != nil {
		return err
	}
	if ev, ok := m.(*pluginpb.ExecuteEvent); ok && ev.GetProgress() != nil || s.method == brokerStreamMethod {
		// Passed on, not kept: a long call's progress, or a knock on the broker
		// stream (which lasts as long as the plugin), does not add up.
		s.b.give(n)
		return nil
	}
	s.held.Add(n)
	if s.ctx.Err() != nil { // the stream's end may have given back what it held already
		s.b.give(s.held.Swap(0))
	}
	return nil
}

// capabilityServer makes the server of a capability the host serves the plugin:
// only the plugin may connect (onlyThePlugin), a message is at most limit bytes
// and within the budget (see budget), refused from its length prefix past it, its
// headers at most maxHeaderBytes, and
// admit, if not nil, decides after the budget whether a call is received. opts are
// go-plugin's; more are the capability's own.
func (inst *Instance) capabilityServer(opts []grpc.ServerOption, limit int, admit tap.ServerInHandle, more ...grpc.ServerOption) *grpc.Server {
	b := inst.budget
	limit = b.messageLimit(limit)
	handle := func(ctx context.Context, info *tap.Info) (context.Context, error) {
		r, err := b.reserve(info.FullMethodName, limit)
		if err != nil {
			return nil, err
		}
		if admit != nil {
			if ctx, err = admit(ctx, info); err != nil {
				r.release() // a refused call's context is not ended by gRPC
				return nil, err
			}
		}
		context.AfterFunc(ctx, r.release)
		return context.WithValue(ctx, reservationKey{}, r), nil
	}
	opts = append(append(opts, inst.onlyThePlugin()...), grpc.MaxRecvMsgSize(limit), grpc.MaxHeaderListSize(maxHeaderBytes), grpc.InTapHandle(handle),
		grpc.ChainUnaryInterceptor(b.keepDecoded))
	opts = append(append(opts, more...), pluginpb.ServerOptions()...)
	return grpc.NewServer(opts...)
}
