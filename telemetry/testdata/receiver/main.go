// Command receiver is the benchmark's OTLP/gRPC receiver, in a process of its own
// as a local collector would be: it serves the protocol's trace and metrics
// services on 127.0.0.1, prints "listening ADDR" once it listens, decodes every
// export and counts its spans, and when its stdin closes prints "spans N" and exits.
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"

	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

type traces struct {
	coltracepb.UnimplementedTraceServiceServer
	spans atomic.Int64
}

func (t *traces) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			t.spans.Add(int64(len(ss.Spans)))
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

type metrics struct {
	colmetricspb.UnimplementedMetricsServiceServer
}

func (metrics) Export(context.Context, *colmetricspb.ExportMetricsServiceRequest) (*colmetricspb.ExportMetricsServiceResponse, error) {
	return &colmetricspb.ExportMetricsServiceResponse{}, nil
}

func main() {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "receiver:", err)
		os.Exit(1)
	}
	t := &traces{}
	s := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(s, t)
	colmetricspb.RegisterMetricsServiceServer(s, metrics{})
	go s.Serve(lis)
	fmt.Printf("listening %s\n", lis.Addr())
	io.Copy(io.Discard, os.Stdin)
	s.GracefulStop()
	fmt.Printf("spans %d\n", t.spans.Load())
}
