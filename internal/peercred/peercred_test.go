package peercred_test

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/toolhost/toolhost/internal/peercred"
)

func pair(t *testing.T) (server, client net.Conn) {
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("unix", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close(); client.Close() })
	return server, client
}

func TestOfReportsThePeer(t *testing.T) {
	server, _ := pair(t)
	p, err := peercred.Of(server)
	if err != nil || p.PID != os.Getpid() || p.UID != os.Getuid() {
		t.Fatalf("peer %+v, %v; want this process", p, err)
	}
}

func TestCredsAdmitOnlyWhatAllowAccepts(t *testing.T) {
	refuse := errors.New("not you")
	server, _ := pair(t)
	if _, _, err := peercred.Creds(func(peercred.Peer) error { return refuse }).ServerHandshake(server); !errors.Is(err, refuse) {
		t.Fatalf("handshake = %v, want the refusal", err)
	}
	server, _ = pair(t)
	conn, info, err := peercred.Creds(func(p peercred.Peer) error { return nil }).ServerHandshake(server)
	if err != nil || conn == nil || info.(peercred.AuthInfo).Peer.PID != os.Getpid() {
		t.Fatalf("handshake = %v, %v", info, err)
	}
}
