package plugins

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/toolhost/toolhost/internal/peercred"
	"github.com/toolhost/toolhost/internal/pluginpb"
	"github.com/toolhost/toolhost/internal/sandbox"
)

// procRunner runs a plugin process for go-plugin (its runner.Runner) in its sandbox
// box, killed as a whole tree, with its exit observable through exited.
type procRunner struct {
	box    *sandbox.Box
	stdout *pluginpb.StdoutFilter // the activation line taken out
	stderr io.ReadCloser          // read by log; go-plugin gets drained
	log    *pluginLog
	// drained is closed once log has read stderr to its end.
	drained chan struct{}
	// maxActivationLine bounds the activation line read off stdout.
	maxActivationLine int
	// socketDir is the private directory go-plugin gave the plugin for its socket:
	// the only place the host connects to (see PluginToHost).
	socketDir string
	// handshake watches the first line go-plugin reads off stdout.
	handshake handshakeLine
	// address is the socket PluginToHost accepted; dial connects only there.
	address atomic.Pointer[string]
	// linkDir, for a multiplexed plugin, is a private directory of the host's in
	// which PluginToHost links the plugin's socket (see there); "" otherwise.
	linkDir string

	waitOnce sync.Once
	exited   chan struct{} // closed once the process has been reaped
	exitErr  error         // the process's exit status; set before exited closes

	mu         sync.Mutex
	killByTime time.Time   // Kill waits until then for a graceful exit; zero: kill at once
	killed     atomic.Bool // Kill was called: go-plugin or the host ended the process
}

func newProcRunner(box *sandbox.Box, maxActivationLine int, log *pluginLog, socketDir string) *procRunner {
	box.Cmd.Stdin = nil // never the host's stdin
	return &procRunner{box: box, exited: make(chan struct{}), maxActivationLine: maxActivationLine, log: log, drained: make(chan struct{}), socketDir: socketDir}
}

func (r *procRunner) Start(context.Context) error {
	var err error
	stdout, err := r.box.StdoutPipe()
	if err != nil {
		return err
	}
	r.stdout = pluginpb.NewStdoutFilter(stdout, r.maxActivationLine)
	if r.stderr, err = r.box.StderrPipe(); err != nil {
		return err
	}
	if err := r.box.Start(); err != nil {
		return fmt.Errorf("start %s: %w", r.Name(), err)
	}
	go func() {
		defer close(r.drained)
		r.log.readLines("stderr", r.stderr)
	}()
	return nil
}

// Wait reaps the process. go-plugin calls it once stdout and stderr are drained.
func (r *procRunner) Wait(context.Context) error {
	r.waitOnce.Do(func() {
		r.exitErr = r.box.Wait()
		close(r.exited)
	})
	<-r.exited
	return r.exitErr
}

// killAfter makes Kill wait until t for the process to exit by itself.
func (r *procRunner) killAfter(t time.Time) {
	r.mu.Lock()
	r.killByTime = t
	r.mu.Unlock()
}

// Kill kills the process tree, after the grace set by killAfter unless the process
// exits first. go-plugin calls it on a failed start and at the end of its own Kill.
func (r *procRunner) Kill(context.Context) error {
	r.killed.Store(true)
	r.mu.Lock()
	wait := time.Until(r.killByTime)
	r.mu.Unlock()
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-r.exited:
		case <-t.C:
		}
	}
	r.killGroup()
	return nil
}

// killGroup ends the plugin's whole process tree (see sandbox.Box.Kill).
func (r *procRunner) killGroup() { r.box.Kill() }

// killedByHost reports whether the process ended by a SIGKILL after Kill was called
// (go-plugin kills a plugin whose start failed); call it after exited is closed.
func (r *procRunner) killedByHost() bool {
	var ee *sandbox.ExitError
	return r.killed.Load() && errors.As(r.exitErr, &ee) && ee.Signal == syscall.SIGKILL
}

// exitStatus describes how the process ended, with the sandbox limits in force when
// it failed; call it after exited is closed.
func (r *procRunner) exitStatus() string {
	var ee *sandbox.ExitError
	switch {
	case r.exitErr == nil:
		return "exit status 0"
	case errors.As(r.exitErr, &ee):
		return ee.Detail()
	}
	return r.exitErr.Error()
}

func (r *procRunner) Stdout() io.ReadCloser           { return r.handshake.watch(r.stdout) }
func (r *procRunner) Stderr() io.ReadCloser           { return drainedReader(r.drained) }
func (r *procRunner) Name() string                    { return r.box.Spec().Name }
func (r *procRunner) Diagnose(context.Context) string { return "" }
func (r *procRunner) ID() string {
	if pid := r.box.PID(); pid != 0 {
		return strconv.Itoa(pid)
	}
	return ""
}
func (r *procRunner) HostToPlugin(network, addr string) (string, string, error) {
	return network, addr, nil
}

// PluginToHost accepts the address of the plugin's handshake only if it is a unix
// socket directly in the directory go-plugin gave the plugin, and the handshake
// offers no TLS certificate: the address and the certificate are the plugin's
// words, and the host would otherwise connect wherever they say (a TCP address, a
// host service's socket, a link in its directory to one) and take the certificate
// into a TLS configuration it does not have. dial then connects only there, and
// only to the plugin's own process tree.
func (r *procRunner) PluginToHost(network, addr string) (string, string, error) {
	if r.handshake.offersCert() {
		return "", "", errors.New("its handshake offers a TLS certificate, and the host takes none (it speaks to a plugin over a private unix socket, not go-plugin's AutoMTLS)")
	}
	if network != "unix" {
		return "", "", fmt.Errorf("its handshake names the %s address %q; the host connects only to a unix socket in the directory it gave the plugin (%s)", network, addr, r.socketDir)
	}
	if !filepath.IsAbs(addr) || filepath.Dir(filepath.Clean(addr)) != filepath.Clean(r.socketDir) {
		return "", "", fmt.Errorf("its handshake names the socket %q, outside the directory the host gave it (%s); the host connects only there", addr, r.socketDir)
	}
	fi, err := os.Lstat(addr)
	if err != nil {
		return "", "", fmt.Errorf("the socket its handshake names: %w", err)
	}
	if t := fi.Mode().Type(); t != fs.ModeSocket {
		what := "a " + t.String() + " file"
		switch t {
		case fs.ModeSymlink:
			what = "a symbolic link"
		case fs.ModeDir:
			what = "a directory"
		case 0:
			what = "a regular file"
		}
		return "", "", fmt.Errorf("its handshake names %q, which is %s, not a socket; the host connects only to the plugin's own socket", addr, what)
	}
	if r.linkDir != "" {
		// Multiplexed: go-plugin dials the address once with net.Dial, past dial's
		// checks. It gets a hard link to the socket's inode in the host's own
		// directory, made without following a link (link(2)) and checked to be a
		// socket: the plugin can swap nothing there, and an inode's socket stays
		// the one that bound it. Only the plugin's tree, and the user's unconfined
		// processes, can write the plugin's directory.
		link := filepath.Join(r.linkDir, "plugin.sock")
		if err := os.Link(addr, link); err != nil {
			return "", "", fmt.Errorf("link the socket its handshake names: %w", err)
		}
		if fi, err := os.Lstat(link); err != nil || fi.Mode().Type() != fs.ModeSocket {
			return "", "", fmt.Errorf("the socket its handshake names, %q, was replaced before the host linked it: refused", addr)
		}
		addr = link
	}
	r.address.Store(&addr)
	return network, addr, nil
}

// dial is the host's only way to the plugin's gRPC server (go-plugin's dialer, which
// connects to whatever address the handshake named, is replaced by it): the socket
// PluginToHost accepted, while it is a socket, when its server is a process of the
// plugin's tree. gRPC reconnects through it too, so a socket replaced after the
// handshake (by a link to a host service, or another process's socket) is refused
// each time, a link before any connection is made.
func (r *procRunner) dial(ctx context.Context, _ string) (net.Conn, error) {
	addr := r.address.Load()
	if addr == nil {
		return nil, errors.New("the plugin's handshake named no socket the host accepted")
	}
	if fi, err := os.Lstat(*addr); err != nil {
		return nil, fmt.Errorf("the plugin's socket: %w", err)
	} else if fi.Mode().Type() != fs.ModeSocket {
		return nil, fmt.Errorf("the plugin's socket %s was replaced (now not a socket): refused", *addr)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", *addr)
	if err != nil {
		return nil, err
	}
	p, err := peercred.Of(c)
	switch {
	case errors.Is(err, peercred.ErrUnsupported):
		return c, nil // the socket's private directory is the only guard here
	case err != nil:
		c.Close()
		return nil, fmt.Errorf("the plugin's socket %s: %w", *addr, err)
	case !r.box.Contains(p.PID):
		c.Close()
		return nil, fmt.Errorf("the plugin's socket %s is served by process %d, which is not the plugin's: refused", *addr, p.PID)
	}
	return c, nil
}

// brokerStreamMethod is go-plugin's broker stream, on which the host announces the
// capabilities it serves to the plugin (see Instance.serveCapabilities), and the
// plugin knocks before it opens a connection to one (the broker is multiplexed:
// see Instance.clientConfig).
const brokerStreamMethod = "/plugin.GRPCBroker/StartStream"

// brokerInbound passes, of what a plugin sends on its broker stream, only a knock
// for a capability the host serves it (served reports which ids), and ends the
// stream at anything else: the host never dials a broker id a plugin serves, so it
// needs no connection info, and go-plugin would keep a goroutine (five seconds) or
// a map entry (for ever, a knock for any other id) for each, as many as a plugin
// cares to send. The host's announcements to the plugin end with the stream: a
// plugin that does this gets no capability it has not dialled yet.
func brokerInbound(served func(id uint32) bool) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil || method != brokerStreamMethod {
			return s, err
		}
		return refusingStream{s, served}, nil
	}
}

type refusingStream struct {
	grpc.ClientStream
	served func(uint32) bool
}

func (s refusingStream) RecvMsg(m any) error {
	if err := s.ClientStream.RecvMsg(m); err != nil {
		return err
	}
	if id, ok := knockFor(m); ok && s.served(id) {
		return nil
	}
	return status.Error(codes.PermissionDenied, "the plugin sent on its broker stream what the host never asks a plugin for (connection info, or a knock for a capability it does not serve it): the stream is closed")
}

// knockFor reports the broker id m (go-plugin's ConnInfo, whose package is
// internal to go-plugin) knocks for, if m is a knock: knock set, ack not, and no
// address.
func knockFor(m any) (uint32, bool) {
	pm, ok := m.(proto.Message)
	if !ok {
		return 0, false
	}
	r := pm.ProtoReflect()
	fields := r.Descriptor().Fields()
	id, knock, network, address := fields.ByName("service_id"), fields.ByName("knock"), fields.ByName("network"), fields.ByName("address")
	if id == nil || knock == nil || knock.Message() == nil || network == nil || address == nil {
		return 0, false
	}
	if r.Get(network).String() != "" || r.Get(address).String() != "" || !r.Has(knock) {
		return 0, false
	}
	k := r.Get(knock).Message()
	kf := k.Descriptor().Fields()
	isKnock, ack, errText := kf.ByName("knock"), kf.ByName("ack"), kf.ByName("error")
	if isKnock == nil || ack == nil || errText == nil || !k.Get(isKnock).Bool() || k.Get(ack).Bool() || k.Get(errText).String() != "" {
		return 0, false
	}
	return uint32(r.Get(id).Uint()), true
}

// handshakeLine passes stdout through and watches its first line, go-plugin's
// handshake (CORE|APP|NETWORK|ADDRESS|PROTOCOL|CERT|MUX), for a certificate: a
// sixth field longer than 50 bytes, which go-plugin would load into the client's
// TLS configuration (nil here: the host's process would panic). Safe for one reader
// and concurrent offersCert calls.
type handshakeLine struct {
	src io.ReadCloser

	mu      sync.Mutex
	done    bool // the line's end was read
	field   int  // the field being read, from 0
	certLen int  // the bytes of field 5 read so far
}

func (h *handshakeLine) watch(src io.ReadCloser) *handshakeLine {
	h.src = src
	return h
}

func (h *handshakeLine) Read(p []byte) (int, error) {
	n, err := h.src.Read(p)
	h.mu.Lock()
	for _, b := range p[:n] {
		if h.done {
			break
		}
		switch {
		case b == '\n':
			h.done = true
		case b == '|':
			h.field++
		case h.field == 5:
			h.certLen++
		}
	}
	h.mu.Unlock()
	return n, err
}

func (h *handshakeLine) Close() error { return h.src.Close() }

// offersCert reports whether the handshake read so far offers a certificate.
func (h *handshakeLine) offersCert() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.certLen > 50
}

// attachedRunner follows a plugin process the host attached to but does not own (a
// plugin started by hand with -debug): Wait returns when the process is gone or the
// host detached; Kill only detaches.
type attachedRunner struct {
	pid      int
	detached chan struct{}
	once     sync.Once
	exited   chan struct{} // closed when the process is gone (not on detach)
}

func newAttachedRunner(pid int) *attachedRunner {
	return &attachedRunner{pid: pid, detached: make(chan struct{}), exited: make(chan struct{})}
}

func (r *attachedRunner) Wait(context.Context) error {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-r.detached:
			return nil
		case <-t.C:
			if processGone(r.pid) {
				close(r.exited)
				return nil
			}
		}
	}
}

func (r *attachedRunner) Kill(context.Context) error {
	r.once.Do(func() { close(r.detached) })
	return nil
}

func (r *attachedRunner) ID() string { return strconv.Itoa(r.pid) }
func (r *attachedRunner) PluginToHost(network, addr string) (string, string, error) {
	return network, addr, nil
}
func (r *attachedRunner) HostToPlugin(network, addr string) (string, string, error) {
	return network, addr, nil
}

// drainedReader is what go-plugin reads as a plugin's stderr: nothing, and the end
// once done is closed (go-plugin reaps the process after that).
type drainedReader <-chan struct{}

func (d drainedReader) Read([]byte) (int, error) { <-d; return 0, io.EOF }
func (d drainedReader) Close() error             { return nil }
