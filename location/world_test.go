//go:build linux

package location_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/toolhost/toolhost/internal/hosttest"
	"github.com/toolhost/toolhost/internal/sandbox"
)

// TestHostilePluginFindsAWorld: the hostile plugin tries each class of issue 23 —
// descriptors the host holds without close-on-exec (a file, a TCP connection), the
// user's key and the keyrings, metadata (chmod, chown, utimes, setxattr), stat and
// inotify outside, a host path socket and abstract name, an abstract name of its
// own that a host client then tries, filling its TMPDIR beyond its caps — and more
// (ptrace and /proc of host processes, mount, unshare, clone into a namespace,
// setns, chroot, perf_event_open, io_uring, userfaultfd, bpf, open_by_handle_at,
// mknod, netlink, system files it was not given). Every attempt fails with an
// error, and a well-behaved plugin, a confined MCP server and a confined manifest
// tool keep working in the same Location.
func TestHostilePluginFindsAWorld(t *testing.T) {
	if ok, why := sandbox.WorldAvailable(); !ok {
		t.Skip("no world here: " + why)
	}
	bin := buildHostile(t)
	script, path := everythingServer(t)
	e := newEnv(t)
	e.opts.SocketDir = t.TempDir()

	// What the host holds: a secret outside, open without close-on-exec, a TCP
	// connection so too, a key in its session keyring, a path socket and an
	// abstract name.
	parent := canonicalDir(t, t.TempDir())
	host := hosttest.Hold(t, parent)
	secret, key, hostSock, hostAbstract := host.Secret, host.Key, host.Socket, host.Abstract
	// A directory like ~/.ssh: a watch on it would tell when its key is read.
	keys := canonicalDir(t, t.TempDir())
	os.WriteFile(filepath.Join(keys, "id_ed25519"), []byte("key"), 0o600)

	// The Location: the hostile plugin with a small TMPDIR, the echo plugin, and
	// the MCP server and the manifest tool confined too.
	dir := filepath.Join(parent, "ws")
	os.Mkdir(dir, 0o755)
	cfg := hostileConfig(bin, script, path, "", "tr a-z A-Z")
	cfg["plugins"].([]obj)[0]["sandbox"] = obj{"memory": "1GiB", "processes": 64, "tmp_size": "8MiB", "tmp_files": 200}
	nodeDir, _ := filepath.Abs("../mcp/testdata/node")
	nodeDir, _ = filepath.EvalSymlinks(nodeDir)
	cfg["mcp_servers"].([]obj)[0]["sandbox"] = obj{"read": []string{nodeDir}}
	cfg["tools"].([]obj)[0]["sandbox"] = obj{}
	setConfig(t, dir, cfg)
	l := e.activate(t, dir)
	wellBehaved(t, l)
	var echoPID int
	for _, p := range l.Plugins() {
		if p.Name() == "echo" {
			echoPID = p.Current().PID()
		}
	}
	if mode, confined := l.MCPServers()[0].Current().Containment(); !confined {
		t.Fatalf("the MCP server is not confined (containment %s)", mode)
	}

	impostor := fmt.Sprintf("toolhost-test-impostor-%d", rand.Int64())
	in, _ := json.Marshal(obj{
		"files":      []string{secret, filepath.Join(dir, ".toolhost", "config.json"), filepath.Join(keys, "id_ed25519")},
		"watch":      []string{keys, filepath.Join(dir, ".toolhost")},
		"unix":       []string{hostSock},
		"abstract":   []string{hostAbstract},
		"listen":     impostor,
		"key":        key,
		"pids":       []int{os.Getpid(), echoPID},
		"fill_mib":   40,
		"fill_files": 1000,
	})
	r := report(t, l, "escape", string(in))
	// A host client that connects to the name the plugin listens on.
	if c, err := net.Dial("unix", "@"+impostor); err == nil {
		c.Close()
		r["host client connects to @"+impostor] = "ok: REACHED THE IMPOSTOR"
	} else {
		r["host client connects to @"+impostor] = "denied: " + err.Error()
	}
	for _, k := range slices.Sorted(maps.Keys(r)) {
		v := r[k]
		t.Logf("%-70s %s", k, v)
		switch {
		case strings.HasPrefix(k, "control: "):
			if v != "listening" {
				t.Errorf("%s: %s", k, v)
			}
		case k == "fill TMPDIR with bytes":
			var n int
			if _, err := fmt.Sscanf(v, "refused after %d MiB", &n); err != nil || n > 8 || !strings.Contains(v, "no space left") {
				t.Errorf("%s: %s, want at most 8 MiB, then no space left", k, v)
			}
		case k == "fill TMPDIR with files":
			var n int
			if _, err := fmt.Sscanf(v, "refused after %d files", &n); err != nil || n > 200 || !strings.Contains(v, "no space left") {
				t.Errorf("%s: %s, want at most 200 files, then no space left", k, v)
			}
		case !strings.HasPrefix(v, "denied: "):
			t.Errorf("%s: %s", k, v)
		}
	}
	for _, want := range []string{"inherited descriptors", "chmod 0777 " + secret, "stat " + secret, "inotify watch " + keys,
		"connect " + hostSock, "connect abstract @" + hostAbstract, "ptrace attach " + fmt.Sprint(os.Getpid()),
		"fill TMPDIR with bytes", "fill TMPDIR with files", "add_key to the session keyring"} {
		if _, ok := r[want]; !ok {
			t.Errorf("no attempt %q", want)
		}
	}
	if fi, _ := os.Stat(filepath.Join(dir, ".toolhost", "config.json")); fi.Mode().Perm() != 0o644 {
		t.Errorf("the Location's config is now %v", fi.Mode())
	}
	if _, err := unix.KeyctlSearch(unix.KEY_SPEC_SESSION_KEYRING, "user", "hostile-key", 0); err == nil {
		t.Errorf("the plugin's key is in the host's session keyring")
	}
	wellBehaved(t, l)
}
