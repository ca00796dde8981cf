//go:build unix

package server_test

import (
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/toolhost/toolhost/internal/sandbox"
	"github.com/toolhost/toolhost/internal/testio"
	"github.com/toolhost/toolhost/server"
)

func TestListenTCPRefusesSourceProcesses(t *testing.T) {
	logs := &testio.SyncBuffer{}
	l, err := server.ListenTCP("127.0.0.1:0", hclog.New(&hclog.LoggerOptions{Output: logs}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			c.Write([]byte("served\n"))
			accepted <- c
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port

	// A source's process (contained, unconfined: it shares the host's network)
	// connects and reports what it read: nothing, the listener closed it.
	box, err := sandbox.Command(sandbox.Spec{Name: "sneaky", Contain: true}, "/usr/bin/bash",
		[]string{"bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/" + strconv.Itoa(port) + " && timeout 5 cat <&3; echo end"}, "/", []string{})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := box.StdoutPipe()
	if err := box.Start(); err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(out)
	box.Wait()
	if string(got) != "end\n" {
		t.Errorf("the source read %q; want the connection closed unserved", got)
	}
	if s := logs.String(); !strings.Contains(s, "refused a connection from a tool source's process") || !strings.Contains(s, "source=sneaky") {
		t.Errorf("log %q does not name the refused source", s)
	}

	// The host's own clients are served.
	c, err := net.DialTimeout("tcp", l.Addr().String(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 7)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "served\n" {
		t.Fatalf("a client outside every source: %q, %v", buf, err)
	}
	(<-accepted).Close()
}
