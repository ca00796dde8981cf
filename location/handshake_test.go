//go:build linux

package location_test

import (
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolhost/toolhost/internal/proctest"
	"github.com/toolhost/toolhost/internal/sandbox"
	"github.com/toolhost/toolhost/location"
	"github.com/toolhost/toolhost/plugins"
	"github.com/toolhost/toolhost/registry"
)

// TestHostileHandshakeIsAStartError: go-plugin's handshake line is the plugin's to
// write, and a hostile plugin names an address of its choosing — a TCP service of
// the host, a host unix socket outside the directory it was given, a link in that
// directory to one — or offers a TLS certificate of its own. The host connects to
// none of them: each is a start error naming what the handshake said, the host's
// listeners see no connection, and a well-behaved plugin in the same Location keeps
// working. In a world of its own and in the fallback without one.
func TestHostileHandshakeIsAStartError(t *testing.T) {
	bin := buildHostile(t)
	// What a hostile handshake would point the host at: a TCP listener and a unix
	// socket outside every plugin's directory, each counting what connects.
	var dialed atomic.Int64
	serve := func(l net.Listener) {
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				dialed.Add(1)
				c.Write([]byte("SERVED!!!"))
				c.Close()
			}
		}()
	}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serve(tl)
	hostSock := filepath.Join(canonicalDir(t, t.TempDir()), "service.sock")
	ul, err := net.Listen("unix", hostSock)
	if err != nil {
		t.Fatal(err)
	}
	serve(ul)

	for _, world := range []bool{true, false} {
		name := "World"
		if !world {
			name = "Fallback"
		}
		t.Run(name, func(t *testing.T) {
			if !world {
				t.Setenv(sandbox.OffEnv, "world")
			} else if ok, why := sandbox.WorldAvailable(); !ok {
				t.Skip("no world here: " + why)
			}
			for _, c := range []struct {
				name   string
				kind   string
				target string
				want   string
			}{
				{"TCPAddress", "tcp", tl.Addr().String(), `names the tcp address "` + tl.Addr().String() + `"`},
				{"SocketOutside", "unix", hostSock, `names the socket "` + hostSock + `", outside the directory`},
				{"LinkToASocketOutside", "link", hostSock, "which is a symbolic link, not a socket"},
				{"Certificate", "cert", "", "offers a TLS certificate"},
			} {
				t.Run(c.name, func(t *testing.T) {
					before := dialed.Load()
					e := newEnv(t)
					e.opts.SocketDir = shortDir(t) // a socket's path has at most 107 bytes
					dir := workspace(t, pluginsConfig(echoPlugin("echo"),
						obj{"name": "hostile", "path": bin, "env": obj{"HOSTILE_HANDSHAKE": c.kind, "HOSTILE_TARGET": c.target}, "start_timeout": "20s"}))
					l := e.activate(t, dir)
					st := sourceErr(t, l, "plugin:hostile")
					t.Log(st.Err)
					if !strings.Contains(st.Err.Error(), c.want) || !strings.Contains(st.Err.Error(), `"hostile"`) {
						t.Errorf("start error %q: want it to name the plugin and say %q", st.Err, c.want)
					}
					if out := callEcho(t, l, "still here"); out.Text != "still here" {
						t.Errorf("the well-behaved plugin: %+v", out)
					}
					if n := dialed.Load() - before; n != 0 {
						t.Errorf("the host connected %d times to where the plugin's handshake pointed", n)
					}
				})
			}
		})
	}
	if _, err := os.Lstat(hostSock); err != nil {
		t.Errorf("the host's socket: %v", err)
	}
}

// shortDir is a new directory with a short path, removed at the end of the test.
func shortDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "th")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// TestHostileBrokerFloodCostsTheHostNothing: a plugin serving go-plugin's broker
// stream itself sends the host connection info for ever new broker ids, which the
// host never asks a plugin for (go-plugin starts a goroutine for each, living five
// seconds). The host closes the stream at the first: its goroutines do not grow
// while the plugin tries until its start times out, and a well-behaved plugin keeps
// working.
func TestHostileBrokerFloodCostsTheHostNothing(t *testing.T) {
	bin := buildHostile(t)
	e := newEnv(t)
	e.opts.SocketDir = shortDir(t)
	dir := workspace(t, pluginsConfig(echoPlugin("echo"),
		obj{"name": "hostile", "path": bin, "env": obj{"HOSTILE_HANDSHAKE": "broker-flood"}, "start_timeout": "8s"}))
	base := runtime.NumGoroutine()
	var peak atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if n := int64(runtime.NumGoroutine()); n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	l := e.activate(t, dir) // waits for the hostile plugin's first start to fail
	st := sourceErr(t, l, "plugin:hostile")
	close(stop)
	<-sampled
	t.Logf("start error: %v; goroutines: %d before, at most %d during the flood", st.Err, base, peak.Load())
	if out := callEcho(t, l, "beside it"); out.Text != "beside it" {
		t.Errorf("the well-behaved plugin: %+v", out)
	}
	if peak.Load() > int64(base)+1000 {
		t.Errorf("the host's goroutines grew from %d to %d while the plugin flooded its broker stream", base, peak.Load())
	}
}

// TestHostileSocketSwapIsNotFollowed: after its start the plugin replaces its own
// socket with a link to a host service's socket and cuts every connection, so that
// the host dials again. The host does not follow the link: its next call to the
// plugin fails (in the fallback, where the host never dials twice, the plugin
// exits with its connection and its next call reaches a restarted generation), the
// host service sees no connection, and a well-behaved plugin keeps working. In a
// world of its own and in the fallback.
func TestHostileSocketSwapIsNotFollowed(t *testing.T) {
	bin := buildHostile(t)
	var dialed atomic.Int64
	hostSock := filepath.Join(shortDir(t), "service.sock")
	ul, err := net.Listen("unix", hostSock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ul.Close() })
	go func() {
		for {
			c, err := ul.Accept()
			if err != nil {
				return
			}
			dialed.Add(1)
			c.Close()
		}
	}()
	for _, world := range []bool{true, false} {
		name := "World"
		if !world {
			name = "Fallback"
		}
		t.Run(name, func(t *testing.T) {
			if !world {
				t.Setenv(sandbox.OffEnv, "world")
			} else if ok, why := sandbox.WorldAvailable(); !ok {
				t.Skip("no world here: " + why)
			}
			before := dialed.Load()
			e := newEnv(t)
			e.opts.SocketDir = shortDir(t)
			l := e.activate(t, workspace(t, pluginsConfig(echoPlugin("echo"),
				obj{"name": "hostile", "path": bin, "call_timeout": "5s"})))
			s, err := settleIn(t, l, "swap", `{"target":"`+hostSock+`"}`)
			t.Logf("swap: %v, %v", s, err)
			s, err = settleIn(t, l, "cut", `{}`)
			t.Logf("cut: %v, %v", s, err)
			s, err = settleIn(t, l, "register", `{"names":["x"]}`)
			t.Logf("the call after: %v, %v", s, err)
			if err == nil && s.Outcome == registry.Completed {
				// Without a world its broker is multiplexed over the host's one
				// connection, which the host never dials again: cut, the plugin's
				// server ends with it, the process exits, and the host restarts it.
				// The call reaches the new generation, never the link. (The new
				// generation's tools serve before the supervisor names it current:
				// wait for that, and for ever if generation 1 served the call.)
				if world {
					t.Errorf("a call to the plugin (generation %d) after the swap: %v", pluginNamed(l, "hostile").Current().Generation(), s)
				} else {
					proctest.Until(t, func() bool { return pluginNamed(l, "hostile").Current().Generation() >= 2 })
				}
			}
			if n := dialed.Load() - before; n != 0 {
				t.Errorf("the host connected %d times to the socket the plugin's link points to", n)
			}
			if out := callEcho(t, l, "still here"); out.Text != "still here" {
				t.Errorf("the well-behaved plugin: %+v", out)
			}
		})
	}
}

// pluginNamed is l's plugin name.
func pluginNamed(l *location.Location, name string) *plugins.Supervisor {
	for _, p := range l.Plugins() {
		if p.Name() == name {
			return p
		}
	}
	panic("no plugin " + name)
}
