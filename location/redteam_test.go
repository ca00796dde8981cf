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

	"github.com/hashicorp/go-hclog"

	"github.com/toolhost/toolhost/internal/sandbox"
	"github.com/toolhost/toolhost/internal/testio"
	"github.com/toolhost/toolhost/location"
	"github.com/toolhost/toolhost/registry"
	sandboxcfg "github.com/toolhost/toolhost/sandbox"
	"github.com/toolhost/toolhost/server"
)

// TestHostilePluginPassesNothing: the hostile plugin, confined, tries what a
// process holds besides paths. Descriptors: it sends one of its own (a memfd) to
// every socket of its socket directory, the host's broker listeners among them,
// looks for any queued on its own sockets, and meets a hostile plugin of another
// Location, which listens on a path socket in its TMPDIR and in its socket
// directory and on an abstract name, serving a descriptor of a file with its
// Location's secret, and leaves files in its TMPDIR and /tmp; and it connects to a
// host service's path socket (as a session bus or an ssh-agent listens). Processes: it
// traces the host, a well-behaved plugin and the other Location's plugin, reads
// their memory, their /proc files and descriptors (pidfd_getfd), stops them.
// Execution: it runs a copy of itself as itself, through /proc/self/exe, written
// to its TMPDIR, setuid there, and from a memfd (execveat); each must run as
// confined as it (no capability, no_new_privs, its seccomp filter, the host's
// secret unreadable). Cgroups: what /proc/self/cgroup shows it of the host's, and
// writing the host's and the other plugins' cgroup files (moving itself out,
// raising limits, freezing). Every attempt fails, in a world of its own and in the
// fallback without one (in the namespace, cgroup and subreaper modes): in the
// fallback the path sockets whose paths it knows, the other plugin's and the host
// service's, are out of reach because its seccomp filter refuses connect(2), at any
// Landlock ABI, and it sends its descriptor to no socket of its directory. The host holds no descriptor it
// sent, every cgroup file is as it was, and the well-behaved plugin keeps working.
func TestHostilePluginPassesNothing(t *testing.T) {
	bin := buildHostile(t)
	if sandbox.LandlockABI() == 0 {
		t.Skip("this kernel has no Landlock: an untrusted plugin runs unconfined")
	}
	for _, c := range []struct {
		name  string
		mode  sandbox.Mode
		world bool
	}{{"World", sandbox.ModeNamespace, true}, {"Fallback", sandbox.ModeNamespace, false},
		{"FallbackCgroup", sandbox.ModeCgroup, false}, {"FallbackSubreaper", sandbox.ModeSubreaper, false}} {
		world := c.world
		t.Run(c.name, func(t *testing.T) {
			if err := sandbox.Supported(c.mode); err != nil {
				t.Skip(err)
			}
			if !world {
				t.Setenv(sandbox.OffEnv, "world")
			} else if ok, why := sandbox.WorldAvailable(); !ok {
				t.Skip("no world here: " + why)
			}
			e := newEnv(t)
			e.opts.SocketDir = shortDir(t)
			e.opts.SandboxMode = sandboxcfg.Mode(c.mode)

			// The other Location: its hostile plugin waits for this one.
			otherSecret := fmt.Sprintf("the other Location's secret %d", rand.Int64())
			lo := e.activate(t, workspace(t, pluginsConfig(obj{"name": "hostile", "path": bin})))
			abstract := fmt.Sprintf("toolhost-test-meet-%d", rand.Int64())
			in, _ := json.Marshal(obj{"abstract": abstract, "secret": otherSecret})
			met := report(t, lo, "meet", string(in))
			t.Logf("the other plugin: %v", met)
			var peers, files []string
			for _, k := range []string{"tmp socket", "socket dir socket"} {
				if p := met[k]; strings.HasPrefix(p, "/") {
					peers = append(peers, p)
				}
			}
			for _, k := range []string{"file", "tmp file"} {
				if p := met[k]; p != "" {
					files = append(files, p)
				}
			}

			// A host service on a path socket, as the user's session bus or an
			// ssh-agent is.
			bus := filepath.Join(shortDir(t), "bus")
			bl, err := net.Listen("unix", bus)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { bl.Close() })
			go func() {
				for {
					c, err := bl.Accept()
					if err != nil {
						return
					}
					c.Write([]byte("BUS"))
					c.Close()
				}
			}()
			peers = append(peers, bus)

			// The Location under attack, beside a secret outside it.
			parent := canonicalDir(t, t.TempDir())
			secret := filepath.Join(parent, "secret-outside.txt")
			os.WriteFile(secret, []byte("outside"), 0o600)
			dir := filepath.Join(parent, "ws")
			os.Mkdir(dir, 0o755)
			setConfig(t, dir, pluginsConfig(echoPlugin("echo"), obj{"name": "hostile", "path": bin}))
			l := e.activate(t, dir)
			var hostilePID, echoPID int
			for _, p := range l.Plugins() {
				if p.Name() == "echo" {
					echoPID = p.Current().PID()
				} else {
					hostilePID = p.Current().PID()
				}
			}
			otherPID := lo.Plugins()[0].Current().PID()
			pids := []int{os.Getpid(), echoPID, otherPID}
			cgroups := cgroupFiles(append(pids, hostilePID))
			before := readAll(cgroups)
			ownCgroup, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", hostilePID))

			planted := fmt.Sprintf("hostile-planted-%d", rand.Int64())
			in, _ = json.Marshal(obj{"pids": pids, "planted": planted, "peers": peers, "abstract": []string{abstract},
				"files": files, "secret": secret, "cgroups": cgroups})
			r := report(t, l, "red", string(in))
			for _, k := range slices.Sorted(maps.Keys(r)) {
				v := r[k]
				t.Logf("%-70s %s", k, v)
				switch {
				case strings.HasPrefix(k, "control: ") || strings.HasPrefix(v, "control: ") || strings.HasPrefix(v, "denied: "):
				default:
					t.Errorf("%s: %s", k, v)
				}
			}
			wants := []string{"receive a descriptor on its sockets", "see its host's cgroups in /proc/self/cgroup", "unshare a cgroup namespace",
				"exec itself", "exec /proc/self/exe", "exec a copy written to TMPDIR", "exec a setuid copy in TMPDIR", "exec from a memfd (execveat)",
				"meet at abstract @" + abstract}
			for _, p := range peers {
				wants = append(wants, "meet at "+p)
			}
			for _, pid := range pids {
				wants = append(wants, fmt.Sprint("ptrace seize ", pid), fmt.Sprint("process_vm_readv ", pid), fmt.Sprintf("read /proc/%d/environ", pid))
			}
			for _, want := range wants {
				if _, ok := r[want]; !ok {
					t.Errorf("no attempt %q", want)
				}
			}
			if len(peers) == 0 {
				t.Errorf("the other plugin listens on no path socket: %v", met)
			}
			// In a world it reaches the sockets of its directory (its own, the host's
			// broker listeners); in the fallback it connects to none (seccomp refuses
			// connect, and the host's broker is multiplexed over its one connection).
			if n := r["control: sent a descriptor to sockets of its directory"]; world && (n == "" || n == "0") {
				t.Errorf("the plugin sent its descriptor to no socket (%q): the host's side is not tested", n)
			} else if !world && n != "0" {
				t.Errorf("without a world the plugin sent its descriptor to %s sockets of its directory, want none", n)
			}

			// The host's side: no descriptor of the plugin's, cgroups as they were.
			if fds := heldDescriptors(planted); len(fds) > 0 {
				t.Errorf("the host holds the plugin's descriptor: %v", fds)
			}
			for f, was := range before {
				if now, _ := os.ReadFile(f); string(now) != was {
					t.Errorf("%s was %q, is %q", f, was, now)
				}
			}
			// Each of its cgroups is the one it had, or one the host made inside it
			// (the host moves a busy program into a cpu cgroup of its own).
			now, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", hostilePID))
			was, is := strings.Split(string(ownCgroup), "\n"), strings.Split(string(now), "\n")
			if len(was) != len(is) {
				t.Errorf("the hostile plugin's cgroups were\n%s, are\n%s", ownCgroup, now)
			}
			for i := range min(len(was), len(is)) {
				if is[i] != was[i] && !strings.HasPrefix(is[i], strings.TrimSuffix(was[i], "/")+"/") {
					t.Errorf("the hostile plugin's cgroup %s is now %s", was[i], is[i])
				}
			}
			if out := callEcho(t, l, "still here"); out.Text != "still here" {
				t.Errorf("the well-behaved plugin: %+v", out)
			}
		})
	}
}

// cgroupFiles lists the cgroup files of pids' cgroups that a process could move
// itself with, raise its limits or freeze a tree with (not cgroup.kill: a
// successful attack must not end the test).
func cgroupFiles(pids []int) []string {
	var out []string
	for _, pid := range pids {
		data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			f := strings.SplitN(line, ":", 3)
			if len(f) != 3 {
				continue
			}
			var dirs []string
			if f[1] == "" {
				dirs = []string{filepath.Join("/sys/fs/cgroup/unified", f[2]), filepath.Join("/sys/fs/cgroup", f[2])}
			} else {
				for _, c := range strings.Split(strings.TrimPrefix(f[1], "name="), ",") {
					dirs = append(dirs, filepath.Join("/sys/fs/cgroup", c, f[2]))
				}
			}
			for _, d := range dirs {
				for _, name := range []string{"cgroup.procs", "pids.max", "cpu.shares", "cpu.max", "cpu.weight", "memory.max", "freezer.state", "cgroup.freeze"} {
					p := filepath.Join(d, name)
					if _, err := os.Stat(p); err == nil && !slices.Contains(out, p) {
						if name == "freezer.state" && f[2] == "/" {
							continue // the root has none to write
						}
						out = append(out, p)
					}
				}
			}
		}
	}
	return out
}

// readAll reads each of files but the cgroup.procs (which list processes that come
// and go).
func readAll(files []string) map[string]string {
	m := map[string]string{}
	for _, f := range files {
		if filepath.Base(f) != "cgroup.procs" {
			data, _ := os.ReadFile(f)
			m[f] = string(data)
		}
	}
	return m
}

// heldDescriptors lists this process's descriptors whose target names name.
func heldDescriptors(name string) []string {
	entries, _ := os.ReadDir("/proc/self/fd")
	var out []string
	for _, e := range entries {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && strings.Contains(target, name) {
			out = append(out, e.Name()+" -> "+target)
		}
	}
	return out
}

// TestHostileDeepProcessIsASource: the serve API refuses a connection from a
// process of a source's tree at any depth. The hostile plugin, confined in the
// subreaper mode (where a source's tree is the launcher's descendants, and before
// Landlock ABI 9 nothing but the peer check keeps it from a path socket), connects
// to the host's serve socket from a process 80 levels below it: the server refuses
// it and names the source (SourceOf stopped its walk at 64 levels, and served it).
func TestHostileDeepProcessIsASource(t *testing.T) {
	bin := buildHostile(t)
	if err := sandbox.Supported(sandbox.ModeSubreaper); err != nil {
		t.Skip(err)
	}
	logs := &testio.SyncBuffer{}
	sock := filepath.Join(shortDir(t), server.SocketName)
	ul, err := server.ListenUnix(sock, hclog.New(&hclog.LoggerOptions{Output: logs}))
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		for {
			c, err := ul.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("SERVED!!!"))
			c.Close()
		}
	}()
	t.Cleanup(func() {
		ul.Close()
		<-served
	})
	e := newEnv(t)
	e.opts.SocketDir = shortDir(t)
	e.opts.SandboxMode = sandboxcfg.ModeSubreaper
	l := e.activate(t, workspace(t, pluginsConfig(obj{"name": "hostile", "path": bin, "sandbox": obj{"processes": 200}})))
	in, _ := json.Marshal(obj{"socket": sock, "depth": 80})
	s, err := settleIn(t, l, "deep", string(in))
	if err != nil || s.Outcome != registry.Completed {
		t.Fatalf("deep: %v, %v", s, err)
	}
	got := strings.Trim(s.Text(), `"`)
	t.Log(got)
	if !strings.HasPrefix(got, "refused") && !strings.HasPrefix(got, "denied") {
		t.Errorf("a process 80 levels below the plugin: %s", got)
	}
	if strings.HasPrefix(got, "refused") && !strings.Contains(logs.String(), "source=hostile") {
		t.Errorf("the serve socket's log %q does not name the refused source", logs.String())
	}
}

// TestHostilePluginCannotRewriteItsAuthority: the hostile plugin, granted write on
// its whole Location (`"write": ["."]`, as a formatter or a code-editing plugin is),
// rewrites the Location's config to make itself trusted and unconfined: in place,
// by replacing the file, and by moving `.toolhost` aside and making a new one. At
// the next reload it would run with the Location's services and no sandbox.
// Every attempt fails, in a world of its own (with Landlock off too: the world's
// read-only mount holds alone) and in the fallback without one (Landlock, with
// the grant carved around .toolhost); the config is as it was, and after a reload
// the plugin is still untrusted.
func TestHostilePluginCannotRewriteItsAuthority(t *testing.T) {
	bin := buildHostile(t)
	if sandbox.LandlockABI() == 0 {
		t.Skip("this kernel has no Landlock: an untrusted plugin runs unconfined")
	}
	for _, c := range []struct{ name, off string }{{"World", ""}, {"WorldWithoutLandlock", "landlock"}, {"Fallback", "world"}} {
		t.Run(c.name, func(t *testing.T) {
			if c.off != "" {
				t.Setenv(sandbox.OffEnv, c.off)
			}
			if ok, why := sandbox.WorldAvailable(); !ok && c.off != "world" {
				t.Skip("no world here: " + why)
			}
			e := newEnv(t)
			e.opts.SocketDir = shortDir(t)
			hostile := obj{"name": "hostile", "path": bin, "sandbox": obj{"write": []string{"."}}}
			dir := workspace(t, pluginsConfig(hostile, echoPlugin("echo")))
			os.Mkdir(filepath.Join(dir, "src"), 0o755)
			cfgFile := filepath.Join(dir, filepath.FromSlash(location.ConfigPath))
			was, err := os.ReadFile(cfgFile)
			if err != nil {
				t.Fatal(err)
			}
			l := e.activate(t, dir)

			// It can write where it was granted: the grant is real. (Without a
			// world it makes nothing new directly in the Location: Landlock cannot
			// grant that without granting it in .toolhost too.)
			if r := report(t, l, "authority", mustJSON(t, obj{"dir": dir, "files": obj{"src/notes.txt": "mine"}})); r["write src/notes.txt in place"] != "WROTE" {
				t.Fatalf("the plugin cannot write in its grant: %v", r)
			}
			if c.off != "world" { // in a world it makes new files in the Location too
				if r := report(t, l, "authority", mustJSON(t, obj{"dir": dir, "files": obj{"notes.txt": "mine"}})); r["write notes.txt in place"] != "WROTE" {
					t.Errorf("in a world the plugin cannot make a file in its grant: %v", r)
				}
			}
			evil := mustJSON(t, pluginsConfig(obj{"name": "hostile", "path": bin, "trusted": true}, echoPlugin("echo")))
			r := report(t, l, "authority", mustJSON(t, obj{"dir": dir, "files": obj{location.ConfigPath: evil}}))
			for _, k := range slices.Sorted(maps.Keys(r)) {
				t.Logf("%-60s %s", k, r[k])
				if !strings.HasPrefix(r[k], "denied: ") {
					t.Errorf("%s: %s", k, r[k])
				}
			}
			if now, _ := os.ReadFile(cfgFile); string(now) != string(was) {
				t.Errorf("the config is now %s", now)
			}
			if err := l.Reload(t.Context()); err != nil {
				t.Logf("reload: %v", err)
			}
			if p := probe(t, l); p.ServicesGiven {
				t.Errorf("after a reload the hostile plugin has the Location's services: %+v", p)
			}
			if out := callEcho(t, l, "still here"); out.Text != "still here" {
				t.Errorf("the well-behaved plugin: %+v", out)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestHostilePluginHoldsNoMemoryPastItsLimit: the hostile plugin, its memory
// capped at 128 MiB, takes three times that in each way that is not its data
// segment (which RLIMIT_DATA counts): a memfd, a shared anonymous mapping, a shared
// mapping of /dev/zero, System V shared memory (its own IPC namespace's in a
// world). None of them holds it, in a world of its own or in the fallback, and
// the well-behaved plugin keeps working.
func TestHostilePluginHoldsNoMemoryPastItsLimit(t *testing.T) {
	bin := buildHostile(t)
	if sandbox.LandlockABI() == 0 {
		t.Skip("this kernel has no Landlock: an untrusted plugin runs unconfined")
	}
	for _, c := range []struct{ name, off string }{{"World", ""}, {"Fallback", "world"}} {
		t.Run(c.name, func(t *testing.T) {
			if c.off != "" {
				t.Setenv(sandbox.OffEnv, c.off)
			} else if ok, why := sandbox.WorldAvailable(); !ok {
				t.Skip("no world here: " + why)
			}
			e := newEnv(t)
			e.opts.SocketDir = shortDir(t)
			l := e.activate(t, workspace(t, pluginsConfig(
				obj{"name": "hostile", "path": bin, "sandbox": obj{"memory": "128MiB"}}, echoPlugin("echo"))))
			const mib = 3 * 128
			s, err := settleIn(t, l, "memory", mustJSON(t, obj{"mib": mib}))
			if err != nil {
				// Killed for it: the plugin's death is an answer too.
				t.Logf("memory: %v", err)
			} else {
				var r map[string]string
				if err := json.Unmarshal(s.Structured, &r); err != nil {
					t.Fatalf("memory: %v: %s", err, s.Text())
				}
				for _, k := range slices.Sorted(maps.Keys(r)) {
					t.Logf("%-40s %s", k, r[k])
					if !strings.HasPrefix(r[k], "denied: ") {
						t.Errorf("%s: %s, past a limit of 128 MiB", k, r[k])
					}
				}
				if len(r) != 4 {
					t.Errorf("%d ways tried, want 4: %v", len(r), r)
				}
			}
			if out := callEcho(t, l, "still here"); out.Text != "still here" {
				t.Errorf("the well-behaved plugin: %+v", out)
			}
		})
	}
}

// TestConfinedManifestToolCannotRewriteItsAuthority: a manifest tool confined with
// a write grant on its whole Location appends to the Location's config and moves
// .toolhost aside; both fail, in a world and without one, and the config is as it
// was. (The rule is the sandbox's, for every confined program: see
// TestHostilePluginCannotRewriteItsAuthority.)
func TestConfinedManifestToolCannotRewriteItsAuthority(t *testing.T) {
	if sandbox.LandlockABI() == 0 {
		t.Skip("this kernel has no Landlock")
	}
	script := `a=denied; if printf ' ' >> .toolhost/config.json 2>/dev/null; then a=WROTE; fi
m=denied; if mv .toolhost .toolhost.aside 2>/dev/null; then m=MOVED; fi
printf '{"append":"%s","move":"%s"}' "$a" "$m"`
	for _, c := range []struct{ name, off string }{{"World", ""}, {"Fallback", "world"}} {
		t.Run(c.name, func(t *testing.T) {
			if c.off != "" {
				t.Setenv(sandbox.OffEnv, c.off)
			} else if ok, why := sandbox.WorldAvailable(); !ok {
				t.Skip("no world here: " + why)
			}
			e := newEnv(t)
			dir := workspace(t, obj{"permission": allowAll, "tools": []obj{{"name": "rewrite", "description": "Rewrites the config.",
				"input_schema": obj{"type": "object"}, "command": []string{"/bin/sh", "-c", script}, "sandbox": obj{"write": []string{"."}}}}})
			cfgFile := filepath.Join(dir, filepath.FromSlash(location.ConfigPath))
			was, _ := os.ReadFile(cfgFile)
			l := e.activate(t, dir)
			s, err := settleIn(t, l, "rewrite", `{}`)
			if err != nil || s.Outcome != registry.Completed {
				t.Fatalf("rewrite: %v, %v", s, err)
			}
			t.Log(s.Text())
			var r map[string]string
			if err := json.Unmarshal([]byte(s.Text()), &r); err != nil || r["append"] != "denied" || r["move"] != "denied" {
				t.Errorf("the manifest tool: %s (%v)", s.Text(), err)
			}
			if now, _ := os.ReadFile(cfgFile); string(now) != string(was) {
				t.Errorf("the config is now %q", now)
			}
		})
	}
}

// TestHostilePluginHoldsNoSocketBuffersPastItsLimit: the hostile plugin, its memory
// capped at 128 MiB, fills the kernel buffers of unix socket pairs (as many as its
// descriptors allow) with three times that. No RLIMIT counts socket buffers, and
// no seccomp rule can refuse socketpair(2) to a program that needs pipes and
// sockets; only a memory cgroup counts them, which toolhost does not make yet. The
// test measures what one process holds and is skipped, naming the gap, while it
// holds more than its limit (each of its processes, up to its processes cap,
// could hold as much).
func TestHostilePluginHoldsNoSocketBuffersPastItsLimit(t *testing.T) {
	bin := buildHostile(t)
	if sandbox.LandlockABI() == 0 {
		t.Skip("this kernel has no Landlock: an untrusted plugin runs unconfined")
	}
	e := newEnv(t)
	e.opts.SocketDir = shortDir(t)
	l := e.activate(t, workspace(t, pluginsConfig(
		obj{"name": "hostile", "path": bin, "sandbox": obj{"memory": "128MiB"}}, echoPlugin("echo"))))
	s, err := settleIn(t, l, "memory", mustJSON(t, obj{"mib": 3 * 128, "sockets": true}))
	if err != nil || s.Outcome != registry.Completed {
		t.Fatalf("memory: %v, %v", s, err)
	}
	got := strings.Trim(s.Text(), `"`)
	t.Log(got)
	if out := callEcho(t, l, "still here"); out.Text != "still here" {
		t.Errorf("the well-behaved plugin: %+v", out)
	}
	var held int
	if _, err := fmt.Sscanf(got, "held %d MiB", &held); err != nil {
		t.Fatalf("memory: %q", got)
	}
	if held > 128 {
		t.Skipf("GAP: one process of a plugin capped at 128 MiB held %d MiB in unix socket buffers (%s); a memory cgroup would count them", held, got)
	}
}
