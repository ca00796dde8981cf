package server

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/toolhost/toolhost/internal/peercred"
	"github.com/toolhost/toolhost/internal/sandbox"
)

// SocketName is the default socket's file name.
const SocketName = "toolhost.sock"

// TokenName is the default token file's name, next to the default socket.
const TokenName = "toolhost.token"

// ErrNotLoopback is returned by ListenTCP for an address that is not on loopback.
var ErrNotLoopback = errors.New("server: refusing to listen on TCP beyond loopback")

// DefaultSocketPath returns where serve listens by default: $XDG_RUNTIME_DIR/
// toolhost.sock when getenv("XDG_RUNTIME_DIR") is an absolute path (a directory only
// the user can enter), else toolhost.sock in a private directory for the user under
// the system temporary directory (toolhost-<uid>, made mode 0700 by ListenUnix).
func DefaultSocketPath(getenv func(string) string) string {
	if dir := getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(dir) {
		return filepath.Join(dir, SocketName)
	}
	return filepath.Join(privateDir(), SocketName)
}

// privateDir is the fallback directory for the socket and the token.
func privateDir() string {
	return filepath.Join(os.TempDir(), "toolhost-"+strconv.Itoa(os.Getuid()))
}

// DefaultTokenPath returns the token file's default path: next to the socket that
// DefaultSocketPath names.
func DefaultTokenPath(getenv func(string) string) string {
	return filepath.Join(filepath.Dir(DefaultSocketPath(getenv)), TokenName)
}

// ListenUnix listens on a unix socket at path.
//
// The socket's directory must exist (the default private directory is created, mode
// 0700), belong to the user or root, and not be writable by others than its owner:
// nobody else can then replace the socket or the token file beside it. A socket left
// behind by a dead server is removed; a live one makes ListenUnix fail. The socket is
// made mode 0600, and every connection whose peer runs as another user (neither the
// server's uid nor root, per SO_PEERCRED) or belongs to the process tree of a tool
// source this process contains (sandbox.SourceOf: a plugin, an MCP server, a
// manifest command, or anything they started) is closed at once and logged. Closing the
// listener removes the socket file.
func ListenUnix(path string, logger hclog.Logger) (net.Listener, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	path, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("server: socket %s: %w", path, err)
	}
	dir := filepath.Dir(path)
	if dir == privateDir() {
		if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("server: socket directory: %w", err)
		}
	}
	if err := CheckPrivateDir(dir); err != nil {
		return nil, err
	}
	if err := removeStale(path); err != nil {
		return nil, err
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("server: listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("server: socket %s: %w", path, err)
	}
	return &peerCheckListener{Listener: l, uid: os.Getuid(), logger: logger}, nil
}

// CheckPrivateDir fails unless dir is a directory (not a symbolic link) owned by the
// user or root and writable by its owner alone.
func CheckPrivateDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("server: directory %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("server: %s is not a directory", dir)
	}
	if uid, ok := fileOwner(fi); ok && uid != os.Getuid() && uid != 0 {
		return fmt.Errorf("server: directory %s belongs to uid %d, not to this user", dir, uid)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("server: directory %s is writable by others (mode %s): anyone who can write there can replace the socket or the token; use a private directory", dir, fi.Mode().Perm())
	}
	return nil
}

// removeStale removes a socket nobody listens on; anything else at path is an error.
func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("server: socket %s: %w", path, err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("server: %s exists and is not a socket; not touching it", path)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("server: %s: another server is listening there", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("server: remove stale socket %s: %w", path, err)
	}
	return nil
}

// peerCheckListener accepts only peers running as the server's user (or root).
type peerCheckListener struct {
	net.Listener
	uid    int
	logger hclog.Logger
}

func (l *peerCheckListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		p, err := peercred.Of(c)
		if errors.Is(err, peercred.ErrUnsupported) {
			return c, nil // the socket's mode and directory are the guard
		}
		if err == nil && (p.UID == l.uid || p.UID == 0) {
			source, inTree := sandbox.SourceOf(p.PID)
			if !inTree {
				return c, nil
			}
			l.logger.Warn("refused a connection from a tool source's process", "source", source, "peer_pid", p.PID)
			c.Close()
			continue
		}
		l.logger.Warn("refused a connection from another user", "peer_uid", p.UID, "error", err)
		c.Close()
	}
}

// ListenTCP listens on addr, which must be a loopback address ("127.0.0.1:PORT",
// "[::1]:PORT" or "localhost:PORT"; port 0 picks one). Anything else fails with
// ErrNotLoopback: the serve API has no transport security, so it never leaves the
// machine, and the token (see NewToken) keeps other local users out. Every
// connection from a process of a tool source's tree (sandbox.SourceOf, the client
// socket found through /proc/net/tcp{,6}) is closed at once and logged to logger
// (nil: discarded).
func ListenTCP(addr string, logger hclog.Logger) (net.Listener, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("server: TCP address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("%w: %q (use 127.0.0.1:PORT or [::1]:PORT)", ErrNotLoopback, addr)
	}
	network := "tcp"
	if host == "localhost" {
		network = "tcp4"
		addr = net.JoinHostPort("127.0.0.1", addr[len(host)+1:])
	}
	l, err := net.Listen(network, addr)
	if err != nil {
		return nil, fmt.Errorf("server: listen on %s: %w", addr, err)
	}
	if ta, ok := l.Addr().(*net.TCPAddr); !ok || !ta.IP.IsLoopback() {
		l.Close()
		return nil, fmt.Errorf("%w: %s", ErrNotLoopback, l.Addr())
	}
	return &sourceCheckListener{Listener: l, logger: logger}, nil
}

// NewToken returns 32 random bytes, hex encoded.
func NewToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("server: token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// WriteTokenFile writes token to path, readable by the user alone (mode 0600), in a
// directory that CheckPrivateDir accepts (the default private directory is created).
// The file holds the token alone (no trailing newline), so a client may send its
// bytes as they are. It is replaced atomically, never left partly written.
func WriteTokenFile(path, token string) error {
	dir := filepath.Dir(path)
	if dir == privateDir() {
		if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("server: token directory: %w", err)
		}
	}
	if err := CheckPrivateDir(dir); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".token-*") // mode 0600
	if err != nil {
		return fmt.Errorf("server: token file: %w", err)
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(token); err != nil {
		f.Close()
		return fmt.Errorf("server: token file: %w", err)
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("server: token file: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("server: token file: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("server: token file: %w", err)
	}
	return nil
}
