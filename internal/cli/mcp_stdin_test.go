//go:build linux

package cli

import (
	"io"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

func nonblocking(t *testing.T, f *os.File) bool {
	t.Helper()
	rc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var fl int
	if err := rc.Control(func(fd uintptr) { fl, err = unix.FcntlInt(fd, unix.F_GETFL, 0) }); err != nil {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return fl&unix.O_NONBLOCK != 0
}

// TestPollableStdin: a pipe in blocking mode is read through a non-blocking
// duplicate, which Close interrupts; restore puts the pipe back in blocking mode
// and leaves it open. A regular file is left alone.
func TestPollableStdin(t *testing.T) {
	// A pipe in blocking mode, as a client makes for its server's stdin (os.Pipe's
	// are non-blocking).
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	blocking := os.NewFile(uintptr(fds[0]), "stdin")
	w := os.NewFile(uintptr(fds[1]), "client")
	defer blocking.Close()
	defer w.Close()
	if nonblocking(t, blocking) {
		t.Fatal("the test's pipe is non-blocking")
	}

	pf, restore := pollable(blocking)
	if pf == nil {
		t.Fatal("a pipe in blocking mode was not made pollable")
	}
	if !nonblocking(t, blocking) {
		t.Error("the pipe is not in non-blocking mode while served")
	}
	if _, err := w.WriteString("line\n"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(pf, buf); err != nil || string(buf) != "line\n" {
		t.Fatalf("read %q, %v", buf, err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := pf.Read(buf)
		done <- err
	}()
	pf.Close() // as stdioConn.Close does: the pending read ends
	if err := <-done; err == nil {
		t.Error("a read pending at Close returned no error")
	}
	restore()
	if nonblocking(t, blocking) {
		t.Error("the pipe is still in non-blocking mode after restore")
	}
	if _, err := w.WriteString("x"); err != nil {
		t.Fatal(err)
	}
	if _, err := blocking.Read(buf[:1]); err != nil || buf[0] != 'x' {
		t.Errorf("the original file after restore: %q, %v", buf[:1], err)
	}

	file, err := os.CreateTemp(t.TempDir(), "stdin")
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	if pf, _ := pollable(file); pf != nil {
		t.Error("a regular file was made pollable")
	}
}
