package pluginpb

import (
	"bytes"
	"fmt"
	"testing"

	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// TestCodecRoundTrip checks that messages of every size class survive encoding and
// decoding, and that a decoded message keeps its bytes after the buffers it came
// from went back to the pool and were reused by the next message.
func TestCodecRoundTrip(t *testing.T) {
	var kept []*ExecuteRequest
	for _, n := range []int{0, 100, 1 << 10, 32<<10 + 1, 64 << 10, 1<<20 - 100, 2*ChunkSize - 200} {
		in := &ExecuteRequest{Registration: 7, Tool: "echo", Input: bytes.Repeat([]byte{byte('a' + n%26)}, n)}
		data, err := protocolCodec.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		// As the transport hands it over: in frames of at most 16 KiB.
		frames := split(data.Materialize(), 16<<10)
		data.Free()
		out := &ExecuteRequest{}
		if err := protocolCodec.Unmarshal(frames, out); err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		frames.Free()
		if out.Tool != "echo" || out.Registration != 7 || !bytes.Equal(out.Input, in.Input) {
			t.Fatalf("%d bytes: decoded %d bytes of input, tool %q", n, len(out.Input), out.Tool)
		}
		kept = append(kept, out)
	}
	for _, out := range kept {
		want := bytes.Repeat([]byte{byte('a' + len(out.Input)%26)}, len(out.Input))
		if !bytes.Equal(out.Input, want) {
			t.Fatalf("a decoded %d-byte input changed after its buffer was reused", len(out.Input))
		}
	}
	if err := protocolCodec.Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{0xff, 0xff})}, &ExecuteRequest{}); err == nil {
		t.Fatal("garbage decoded without an error")
	}
	if _, err := protocolCodec.Marshal("not a message"); err == nil {
		t.Fatal("a non-message encoded without an error")
	}
}

func split(b []byte, size int) mem.BufferSlice {
	var s mem.BufferSlice
	for len(b) > 0 {
		n := min(len(b), size)
		s = append(s, mem.SliceBuffer(bytes.Clone(b[:n])))
		b = b[n:]
	}
	return s
}

// BenchmarkCodec encodes and decodes one ExecuteRequest, as the two ends of a call
// do, with gRPC's default codec and with the protocol's.
//
//	go test -run '^$' -bench Codec -benchmem ./internal/pluginpb/
func BenchmarkCodec(b *testing.B) {
	codecs := []struct {
		name  string
		codec encoding.CodecV2
	}{
		{"grpc-default", encoding.GetCodecV2(grpcproto.Name)},
		{"protocol", protocolCodec},
	}
	for _, size := range []int{64 << 10, 512 << 10} {
		msg := &ExecuteRequest{Tool: "echo", Input: bytes.Repeat([]byte{'a'}, size)}
		data, _ := protocolCodec.Marshal(msg)
		frames := split(data.Materialize(), 16<<10) // as the transport hands a message over
		for _, c := range codecs {
			b.Run(fmt.Sprintf("size=%dKiB/codec=%s", size>>10, c.name), func(b *testing.B) {
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					data, err := c.codec.Marshal(msg)
					if err != nil {
						b.Fatal(err)
					}
					data.Free()
					var out ExecuteRequest
					if err := c.codec.Unmarshal(frames, &out); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// TestDirtyPool checks the pool's classes: a buffer of the length asked for, with
// the capacity of the smallest class that holds it; lengths above the largest class
// allocated, and buffers of no class's capacity dropped. (Reuse, and messages that
// survive it, are TestCodecRoundTrip's.)
func TestDirtyPool(t *testing.T) {
	p := newDirtyPool(8, 12)
	for _, c := range []struct{ n, cap int }{{1, 256}, {256, 256}, {257, 4096}, {4096, 4096}, {4097, 4097}} {
		b := p.Get(c.n)
		if len(*b) != c.n || cap(*b) != c.cap {
			t.Fatalf("Get(%d): len %d cap %d, want cap %d", c.n, len(*b), cap(*b), c.cap)
		}
		p.Put(b)
	}
	odd := make([]byte, 300)
	p.Put(&odd) // no class has capacity 300: dropped
}
