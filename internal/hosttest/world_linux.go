package hosttest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// Holdings is what the host holds that a program in a world must not reach: what
// the world tests of the sandbox and of a Location try from inside.
type Holdings struct {
	// Secret is a file outside the program's grants, mode 0600, that the host
	// holds open without close-on-exec.
	Secret string
	// Leaked lists, as "dev:ino", the descriptors the host holds without
	// close-on-exec: the secret and a TCP connection.
	Leaked []string
	// Key is a user key in the host's session keyring; 0 when none can be added.
	Key int
	// Socket is a unix socket the host listens on, in dir.
	Socket string
	// Abstract is an abstract unix socket name (without the @) the host listens on.
	Abstract string
}

// Hold makes the host hold Holdings, its files in dir, until t ends.
func Hold(t testing.TB, dir string) *Holdings {
	t.Helper()
	h := &Holdings{Secret: filepath.Join(dir, "secret-outside"), Socket: filepath.Join(dir, "host.sock")}
	if err := os.WriteFile(h.Secret, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	leak, err := os.Open(h.Secret)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { leak.Close() })
	conn, err := net.Dial("tcp", AcceptAndClose(t).Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	connFile, err := conn.(*net.TCPConn).File()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { connFile.Close() })
	for _, f := range []*os.File{leak, connFile} {
		if _, err := unix.FcntlInt(f.Fd(), unix.F_SETFD, 0); err != nil {
			t.Fatal(err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		h.Leaked = append(h.Leaked, fmt.Sprintf("%d:%d", st.Dev, st.Ino))
	}
	if key, err := unix.AddKey("user", "toolhost-test-secret", []byte("s3cret"), unix.KEY_SPEC_SESSION_KEYRING); err != nil {
		t.Logf("no key in the session keyring: %v", err)
	} else {
		h.Key = key
		t.Cleanup(func() { unix.KeyctlInt(unix.KEYCTL_REVOKE, key, 0, 0, 0) })
	}
	h.Abstract = fmt.Sprintf("toolhost-test-host-%d", rand.Int64())
	for _, addr := range []string{h.Socket, "@" + h.Abstract} {
		l, err := net.Listen("unix", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
	}
	return h
}

// AcceptAndClose returns a TCP listener on the loopback that accepts every
// connection and closes it at once; it is closed when t ends.
func AcceptAndClose(t testing.TB) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return l
}
