// Package pluginpb is the wire protocol between the toolhost host and plugin
// processes: the generated gRPC code for plugin.proto, plus the go-plugin handshake and
// the constants both sides share.
package pluginpb

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"sync"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
)

// Handshake is the fixed go-plugin handshake. A binary that does not present it is
// refused before any RPC.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "TOOLHOST_PLUGIN",
	MagicCookieValue: "d3c4f1a0-toolhost-plugin-v1",
}

// PluginName is the key of the one plugin in the go-plugin plugin set.
const PluginName = "toolhost"

// ChunkSize is the largest payload of one streamed event, well under gRPC's 4 MiB
// default message limit.
const ChunkSize = 1 << 20

// codec is the protobuf codec of every plugin-protocol connection, on both ends:
// gRPC's own, except for two things. The protocol's own messages are encoded and
// decoded by the code vtprotobuf generated for them (plugin_vtproto.pb.go, see
// vtMessage); other messages on these connections (go-plugin's broker and stdio) go
// through protobuf's reflection as before. And its buffers: gRPC's default pool has
// no size between 32 KiB and 1 MiB and zeroes a buffer's whole capacity on every
// Get, so each message of 32 KiB to 1 MiB cost a 1 MiB clear where it was encoded
// and again where it was decoded: four 1 MiB clears for one 64 KiB call. This pool
// has a size at every power of two up to 4 MiB (twice a chunk, the largest
// message), and does not clear at all (see dirtyPool).
type codec struct{ pool mem.BufferPool }

var protocolCodec = codec{newDirtyPool(8, 12, 14, 15, 16, 17, 18, 19, 20, 21, 22)}

// dirtyPool is a buffer pool with a size class at each given power of two that
// hands out buffers as they were put back, without clearing them: the codec writes
// every byte of a buffer's length before anything reads it (the encoded message, or
// the received message copied in whole), and proto.Unmarshal copies out what it
// keeps. gRPC's tiered pool cleared each buffer's whole capacity on every Get: a
// 64 KiB message lands in the 128 KiB class, so a 64 KiB call cleared 512 KiB, two
// of them on each side's path. Lengths above the largest class are allocated and
// dropped.
type dirtyPool struct {
	exps  []uint8
	pools []sync.Pool // pools[i] holds *[]byte of capacity 1<<exps[i]
}

func newDirtyPool(exps ...uint8) *dirtyPool {
	return &dirtyPool{exps: exps, pools: make([]sync.Pool, len(exps))}
}

// class is the index of the smallest class that holds n bytes, or -1.
func (p *dirtyPool) class(n int) int {
	for i, e := range p.exps {
		if n <= 1<<e {
			return i
		}
	}
	return -1
}

func (p *dirtyPool) Get(n int) *[]byte {
	i := p.class(n)
	if i < 0 {
		b := make([]byte, n)
		return &b
	}
	if b, ok := p.pools[i].Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<p.exps[i])
	return &b
}

func (p *dirtyPool) Put(b *[]byte) {
	// Only buffers of a class's exact capacity: Get hands them out up to it.
	if i := p.class(cap(*b)); i >= 0 && cap(*b) == 1<<p.exps[i] {
		p.pools[i].Put(b)
	}
}

// DialOption makes a client connection use the plugin protocol's codec.
func DialOption() grpc.DialOption {
	return grpc.WithDefaultCallOptions(grpc.ForceCodecV2(protocolCodec))
}

// ServerOption makes a server use the plugin protocol's codec.
func ServerOption() grpc.ServerOption { return grpc.ForceServerCodecV2(protocolCodec) }

// windowSize is the flow-control window of every stream and connection of the
// protocol, both ends. gRPC's default starts at 64 KiB and lets its BDP estimator
// grow it, and the estimator pings the peer on the first data of every exchange: a
// ping and its ack on each small call, and a 64 KiB message, one frame header over
// the window, waits for a window update in mid-message. A fixed window turns the
// estimator off. Both ends are one host's processes on a local socket, where a large
// window costs nothing until data is actually in flight, and a message is at most
// two chunks (the receive limit).
const windowSize = 4 << 20

// DialOptions are the protocol's codec and transport settings for a client
// connection: the host's to a plugin and a plugin's to the host's capabilities.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{DialOption(), grpc.WithInitialWindowSize(windowSize), grpc.WithInitialConnWindowSize(windowSize)}
}

// ServerOptions are the protocol's codec and transport settings for a server: a
// plugin's, and each of the host's capabilities.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{ServerOption(), grpc.InitialWindowSize(windowSize), grpc.InitialConnWindowSize(windowSize)}
}

func (c codec) Name() string { return "proto" }

// vtMessage is a message with vtprotobuf's generated encoding: straight-line code
// per message type, where protobuf's reflection first builds each type's coder
// tables from its descriptor, which a plugin would pay for the activation's
// messages before its handshake, and the first call for its own (see
// BENCHMARKS.md). The bytes are protobuf's wire format either way (a test holds
// the two to each other).
type vtMessage interface {
	SizeVT() int
	MarshalToSizedBufferVT(data []byte) (int, error)
	UnmarshalVT(data []byte) error
}

// marshalVT encodes m into buf, which must be exactly m.SizeVT() long (the
// generated code writes from its end).
func marshalVT(m vtMessage, buf []byte) error {
	n, err := m.MarshalToSizedBufferVT(buf)
	if err == nil && n != len(buf) {
		err = fmt.Errorf("pluginpb: %T encoded to %d bytes, not the %d it measured (changed while encoded?)", m, n, len(buf))
	}
	return err
}

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	if m, ok := v.(vtMessage); ok {
		size := m.SizeVT()
		if mem.IsBelowBufferPoolingThreshold(size) {
			data := make([]byte, size)
			if err := marshalVT(m, data); err != nil {
				return nil, err
			}
			return mem.BufferSlice{mem.SliceBuffer(data)}, nil
		}
		buf := c.pool.Get(size)
		if err := marshalVT(m, *buf); err != nil {
			c.pool.Put(buf)
			return nil, err
		}
		return mem.BufferSlice{mem.NewBuffer(buf, c.pool)}, nil
	}
	m, err := messageOf(v)
	if err != nil {
		return nil, err
	}
	size := proto.Size(m)
	opts := proto.MarshalOptions{UseCachedSize: true} // the size was just computed
	if mem.IsBelowBufferPoolingThreshold(size) {
		data, err := opts.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(data)}, nil
	}
	buf := c.pool.Get(size)
	out, err := opts.MarshalAppend((*buf)[:0], m)
	if err != nil {
		c.pool.Put(buf)
		return nil, err
	}
	if len(out) != size {
		// Not with the size just computed; but a pooled buffer is not cleared, so
		// never send what a shorter encoding left of an earlier message.
		data := bytes.Clone(out)
		c.pool.Put(buf)
		return mem.BufferSlice{mem.SliceBuffer(data)}, nil
	}
	return mem.BufferSlice{mem.NewBuffer(buf, c.pool)}, nil
}

// Unmarshal decodes data into v. A protocol message is decoded into as given (the
// generated code merges; gRPC hands the codec a new message for each one).
func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	if m, ok := v.(vtMessage); ok {
		buf := data.MaterializeToBuffer(c.pool)
		defer buf.Free()
		return m.UnmarshalVT(buf.ReadOnlyData()) // copies what it keeps
	}
	m, err := messageOf(v)
	if err != nil {
		return err
	}
	buf := data.MaterializeToBuffer(c.pool)
	defer buf.Free()
	return proto.Unmarshal(buf.ReadOnlyData(), m) // copies what it keeps
}

func messageOf(v any) (proto.Message, error) {
	switch v := v.(type) {
	case protoadapt.MessageV1:
		return protoadapt.MessageV2Of(v), nil
	case protoadapt.MessageV2:
		return v, nil
	}
	return nil, fmt.Errorf("pluginpb: %T is not a protobuf message", v)
}

// ReattachEnv names the environment variable that maps plugin names (as in the
// Location config) to Reattach JSON, so the host attaches to plugins started by hand
// (for example under a debugger with -debug) instead of launching them.
const ReattachEnv = "TOOLHOST_REATTACH"

// Reattach is the JSON form of go-plugin's ReattachConfig.
type Reattach struct {
	Pid     int    `json:"pid"`
	Network string `json:"network"`
	Address string `json:"address"`
}

// ReattachFrom converts a go-plugin ReattachConfig to its JSON form.
func ReattachFrom(rc *plugin.ReattachConfig) Reattach {
	return Reattach{Pid: rc.Pid, Network: rc.Addr.Network(), Address: rc.Addr.String()}
}

// Config converts r back to a go-plugin ReattachConfig.
func (r Reattach) Config() (*plugin.ReattachConfig, error) {
	var addr net.Addr
	var err error
	switch r.Network {
	case "unix":
		addr, err = net.ResolveUnixAddr("unix", r.Address)
	case "tcp":
		addr, err = net.ResolveTCPAddr("tcp", r.Address)
	default:
		return nil, fmt.Errorf("pluginpb: reattach: unknown network %q", r.Network)
	}
	if err != nil {
		return nil, fmt.Errorf("pluginpb: reattach: %w", err)
	}
	return &plugin.ReattachConfig{
		Protocol:        plugin.ProtocolGRPC,
		ProtocolVersion: int(Handshake.ProtocolVersion),
		Pid:             r.Pid,
		Addr:            addr,
		Test:            true,
	}, nil
}

// ParseReattach parses the value of ReattachEnv.
func ParseReattach(value string) (map[string]Reattach, error) {
	var m map[string]Reattach
	if err := json.Unmarshal([]byte(value), &m); err != nil {
		return nil, fmt.Errorf("pluginpb: parse %s: %w", ReattachEnv, err)
	}
	return m, nil
}
