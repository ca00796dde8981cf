//go:build linux

package sandbox_test

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/toolhost/toolhost/internal/hosttest"
	"github.com/toolhost/toolhost/internal/sandbox"
	sandboxcfg "github.com/toolhost/toolhost/sandbox"
)

// TestWorldHolds runs a program that tries what issue 23 found open — descriptors
// the host holds without close-on-exec (a file and a TCP connection), the user's
// key, metadata and inotify outside, a host path socket, datagram socket and abstract name, a name
// of its own a host client connects to, filling TMPDIR — and more (its host's
// cgroups seen in /proc/self/cgroup among them), with every
// layer on, then with each layer alone (the others turned off through
// sandbox.OffEnv), and through the fallback where there is no world.
func TestWorldHolds(t *testing.T) {
	if ok, why := sandbox.WorldAvailable(); !ok {
		t.Skip("no world here: " + why)
	}
	host := hosttest.Hold(t, t.TempDir())
	outside, leaked, key, sock, abstract := host.Secret, host.Leaked, host.Key, host.Socket, host.Abstract

	// A host service on a datagram socket (as syslog's or the journal's are).
	dgram := filepath.Join(t.TempDir(), "host.dgram")
	dl, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: dgram, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dl.Close() })

	exe := self(t)
	tmp := sandboxcfg.TmpLimits{Bytes: 4 << 20, Files: 100}
	run := func(t *testing.T, off string) (map[string]string, []string) {
		t.Setenv(sandbox.OffEnv, off)
		listen := fmt.Sprintf("toolhost-test-impostor-%d", rand.Int64())
		b, err := sandbox.Command(sandbox.Spec{Name: "world", Confine: &sandbox.Confinement{Tmp: tmp}}, exe, []string{exe}, "/",
			[]string{"SANDBOX_HELPER=world", "SANDBOX_OUTSIDE=" + outside, "SANDBOX_SOCKET=" + sock, "SANDBOX_DGRAM=" + dgram, "SANDBOX_ABSTRACT=" + abstract,
				"SANDBOX_LISTEN=" + listen, fmt.Sprint("SANDBOX_KEY=", key), fmt.Sprint("SANDBOX_HOST_PID=", os.Getpid()),
				"SANDBOX_FILL_MIB=12", "SANDBOX_FILL_FILES=300"})
		if err != nil {
			t.Fatal(err)
		}
		in, _ := b.StdinPipe()
		out, _ := b.StdoutPipe()
		if err := b.Start(); err != nil {
			t.Fatal(err)
		}
		res := map[string]string{}
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			what, how, _ := strings.Cut(sc.Text(), " ")
			res[what] = how
			if what == "listen-abstract" {
				break
			}
		}
		// A host client for the name the program listens on reaches no impostor.
		if c, err := net.Dial("unix", "@"+listen); err == nil {
			c.Close()
			res["host-connects-to-impostor"] = "ok"
		} else {
			res["host-connects-to-impostor"] = "denied: " + err.Error()
		}
		in.Write([]byte("\n"))
		for sc.Scan() {
			what, how, _ := strings.Cut(sc.Text(), " ")
			res[what] = how
		}
		layers := b.Layers()
		if err := b.Wait(); err != nil {
			t.Fatal(err)
		}
		// Nothing the program did reached the host's keyring.
		if _, err := unix.KeyctlSearch(unix.KEY_SPEC_SESSION_KEYRING, "user", "planted", 0); !errors.Is(err, unix.ENOKEY) {
			t.Errorf("the program's key is in the host's session keyring (%v)", err)
		}
		if fi, _ := os.Stat(outside); fi.Mode().Perm() != 0o600 {
			if !strings.Contains(off, "world") {
				t.Errorf("the file outside is now %v", fi.Mode())
			}
			os.Chmod(outside, 0o600) // Landlock has no right for metadata
		}
		for k, v := range res {
			t.Logf("%-28s %s", k, v)
		}
		t.Logf("layers: %v", layers)
		return res, layers
	}
	expect := func(t *testing.T, res map[string]string, denied ...string) {
		t.Helper()
		for k, v := range res {
			if strings.HasPrefix(k, "inherited-") && slices.Contains(leaked, strings.TrimPrefix(v, "ok ")) {
				t.Errorf("%s: a descriptor of the host reached the program: %s", k, v)
			}
		}
		for _, k := range denied {
			if k == "key-read" && key == 0 {
				continue
			}
			if v, ok := res[k]; !ok || !strings.HasPrefix(v, "denied: ") {
				t.Errorf("%s: %q, want it denied", k, v)
			}
		}
		if v, ok := res["write-tmp"]; ok && !strings.HasPrefix(v, "ok") {
			t.Errorf("write-tmp: %s", v)
		}
	}
	world := []string{"stat-outside", "chmod-outside", "inotify-outside", "connect-host-socket", "send-host-dgram", "connect-host-abstract",
		"host-connects-to-impostor", "read-host-environ", "ptrace-host", "key-read", "mount", "see-host-cgroup"}
	capped := func(t *testing.T, res map[string]string) {
		t.Helper()
		var n int
		if _, err := fmt.Sscanf(res["fill-bytes"], "%d MiB: ", &n); err != nil || n > 4 || !strings.Contains(res["fill-bytes"], "no space left") {
			t.Errorf("fill-bytes %s, want at most 4 MiB, then no space left", res["fill-bytes"])
		}
		if _, err := fmt.Sscanf(res["fill-files"], "%d: ", &n); err != nil || n > 100 || !strings.Contains(res["fill-files"], "no space left") {
			t.Errorf("fill-files %s, want at most 100 files, then no space left", res["fill-files"])
		}
	}
	t.Run("AllLayers", func(t *testing.T) {
		res, layers := run(t, "")
		expect(t, res, append(world, "key-add", "unshare-user")...)
		capped(t, res)
		for _, want := range []string{"pid", "mount", "net", "ipc", "cgroupns", "keyring", "fds", "seccomp"} {
			if !slices.Contains(layers, want) {
				t.Errorf("layers %v, want %q", layers, want)
			}
		}
		if sandbox.LandlockABI() > 0 && !slices.ContainsFunc(layers, func(l string) bool { return strings.HasPrefix(l, "landlock ") }) {
			t.Errorf("layers %v, want landlock", layers)
		}
	})
	t.Run("WorldAlone", func(t *testing.T) {
		res, layers := run(t, "landlock,seccomp")
		expect(t, res, world...)
		capped(t, res)
		if slices.ContainsFunc(layers, func(l string) bool { return strings.HasPrefix(l, "landlock") || l == "seccomp" }) {
			t.Errorf("layers %v with Landlock and seccomp off", layers)
		}
	})
	t.Run("WithoutAWorld", func(t *testing.T) {
		// What the fallback holds: descriptors (the host marks its own close-on-exec
		// at each start), the keyring calls and every socket path and name
		// (seccomp: no connect, no datagram socket), and the files Landlock covers.
		res, layers := run(t, "world")
		expect(t, res, "key-read", "key-add", "host-connects-to-impostor", "connect-host-socket", "send-host-dgram", "connect-host-abstract")
		if slices.Contains(layers, "mount") {
			t.Errorf("layers %v without a world", layers)
		}
	})
	t.Run("SeccompAlone", func(t *testing.T) {
		res, _ := run(t, "world,landlock")
		expect(t, res, "key-read", "key-add", "connect-host-socket", "send-host-dgram", "connect-host-abstract")
	})
}

// TestWorldFailsClearly: a program that cannot be started in its world (its
// binary missing) fails with an error that names it, and leaves nothing.
func TestWorldFailsClearly(t *testing.T) {
	if ok, why := sandbox.WorldAvailable(); !ok {
		t.Skip("no world here: " + why)
	}
	b, err := sandbox.Command(sandbox.Spec{Name: "missing", Confine: &sandbox.Confinement{}}, "/nonexistent/plugin", []string{"plugin"}, "/", nil)
	if err != nil {
		t.Fatal(err)
	}
	err = b.Start()
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/plugin") || !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("start of a missing program: %v", err)
	}
	t.Log(err)
}
