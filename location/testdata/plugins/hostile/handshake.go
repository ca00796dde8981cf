package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/toolhost/toolhost/internal/pluginpb"
)

// handshake writes go-plugin's handshake line itself, as a hostile plugin would,
// instead of serving (its environment's HOSTILE_HANDSHAKE=KIND, HOSTILE_TARGET):
//
//   - tcp TARGET: a TCP address (a host service on the loopback, another machine);
//   - unix TARGET: a unix socket outside the directory the host gave it;
//   - link TARGET: a symbolic link in that directory to TARGET;
//   - cert: its own socket, and a TLS certificate of its own in the sixth field;
//   - broker-flood: its own socket and a gRPC server of its own, whose broker
//     stream sends the host connection info for new broker ids without end (the
//     host never asks a plugin for any).
//
// It then waits to be killed, listening where it listens.
func handshake(kind, target string) {
	dir := os.Getenv("PLUGIN_UNIX_SOCKET_DIR")
	line := func(network, addr, rest string) {
		fmt.Printf("1|%d|%s|%s|grpc%s\n", pluginpb.Handshake.ProtocolVersion, network, addr, rest)
	}
	switch kind {
	case "tcp":
		line("tcp", target, "")
	case "unix":
		line("unix", target, "")
	case "link":
		p := filepath.Join(dir, "plugin-link")
		if err := os.Symlink(target, p); err != nil {
			fmt.Fprintln(os.Stderr, "hostile: symlink:", err)
			os.Exit(1)
		}
		line("unix", p, "")
	case "cert":
		p := filepath.Join(dir, "plugin-cert")
		l, err := net.Listen("unix", p)
		if err != nil {
			fmt.Fprintln(os.Stderr, "hostile: listen:", err)
			os.Exit(1)
		}
		defer l.Close()
		line("unix", p, "|"+certificate()+"|")
	case "broker-flood":
		p := filepath.Join(dir, "plugin-flood")
		l, err := net.Listen("unix", p)
		if err != nil {
			fmt.Fprintln(os.Stderr, "hostile: listen:", err)
			os.Exit(1)
		}
		line("unix", p, "")
		srv := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.UnknownServiceHandler(brokerFlood))
		srv.Serve(l)
	default:
		fmt.Fprintln(os.Stderr, "hostile: unknown handshake", kind)
		os.Exit(2)
	}
	time.Sleep(time.Hour)
}

// certificate is a self-signed certificate, DER in unpadded base64, as go-plugin's
// AutoMTLS sends it.
func certificate() string {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	return base64.RawStdEncoding.EncodeToString(der)
}

// brokerFlood serves every method of the host's connection: go-plugin's broker
// stream with ConnInfo messages for ever new ids (service_id, field 1), as fast as
// the host reads them; every other method waits for the host to give up.
func brokerFlood(_ any, stream grpc.ServerStream) error {
	if m, _ := grpc.MethodFromServerStream(stream); m != "/plugin.GRPCBroker/StartStream" {
		<-stream.Context().Done()
		return stream.Context().Err()
	}
	for id := uint64(1000); ; id++ {
		msg := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), id)
		if err := stream.SendMsg(&msg); err != nil {
			return err
		}

	}
}

// rawCodec passes messages as the bytes they are (*[]byte).
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }
