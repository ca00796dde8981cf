//go:build unix

package permission_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/toolhost/toolhost/internal/filestore"
	"github.com/toolhost/toolhost/internal/proctest"
	"github.com/toolhost/toolhost/permission"
)

// TestHostsKilledWhileSavingLoseNoAcknowledgedApproval: three host processes save
// approvals to one state file at once (each save rewrites some 60 KiB), and two of
// them are SIGKILLed while they hold the file's lock with a temporary file
// written (found through /proc/locks). In every round the file is whole JSON
// holding every approval any host acknowledged, no temporary file is left once
// the next host has started, and it loads them all.
func TestHostsKilledWhileSavingLoseNoAcknowledgedApproval(t *testing.T) {
	const rounds, seed, each = 3, 500, 40
	leftovers, killed := 0, 0
	for round := range rounds {
		dir := t.TempDir()
		state := filepath.Join(dir, "approvals.json")
		var doc struct {
			Version   int              `json:"version"`
			Approvals []map[string]any `json:"approvals"`
		}
		doc.Version = 1
		for i := range seed {
			doc.Approvals = append(doc.Approvals, map[string]any{"action": fmt.Sprintf("seed-%d", i), "resource": strings.Repeat("r", 64), "source": "plugin:seed"})
		}
		data, _ := json.Marshal(doc)
		if err := os.WriteFile(state, data, 0o600); err != nil {
			t.Fatal(err)
		}

		var (
			mu    sync.Mutex
			acked = map[string]bool{}
			wg    sync.WaitGroup
			hosts []pipedSaver
			ended = make([]chan struct{}, 3)
		)
		for h := range 3 {
			cmd := saverPiped(t, state, fmt.Sprintf("r%d-h%d", round, h), each)
			hosts = append(hosts, cmd)
			ended[h] = make(chan struct{})
			wg.Go(func() {
				defer close(ended[h])
				lines := bufio.NewScanner(cmd.out)
				for lines.Scan() {
					mu.Lock()
					acked[lines.Text()] = true
					mu.Unlock()
				}
				if err := cmd.Wait(); h == 2 && err != nil {
					t.Errorf("host %d: %v", h, err)
				}
			})
		}
		for _, h := range []int{0, 1} {
			pid := hosts[h].Process.Pid
			proctest.Until(t, func() bool {
				select {
				case <-ended[h]:
					return true // it finished before it was caught writing
				default:
				}
				temps, _ := filepath.Glob(filepath.Join(dir, ".*.tmp"))
				if len(temps) == 0 || lockHolder(t, filestore.LockPath(state)) != pid {
					return false
				}
				hosts[h].Process.Signal(syscall.SIGKILL)
				killed++
				return true
			})
		}
		wg.Wait()

		got := savedActions(t, state) // fails on a file that is not whole JSON
		for a := range acked {
			if !got[a] {
				t.Errorf("round %d: approval %s acknowledged, then lost", round, a)
			}
		}
		temps, _ := filepath.Glob(filepath.Join(dir, ".*.tmp"))
		leftovers += len(temps)
		s, err := permission.New(permission.Options{StateFile: state})
		if err != nil {
			t.Fatalf("round %d: the next host cannot start: %v", round, err)
		}
		s.Close()
		if temps, _ := filepath.Glob(filepath.Join(dir, ".*.tmp")); len(temps) != 0 {
			t.Errorf("round %d: temporary files left after the next start: %v", round, temps)
		}
		if len(got) < seed+len(acked) {
			t.Errorf("round %d: %d approvals, want at least %d", round, len(got), seed+len(acked))
		}
	}
	t.Logf("%d rounds: %d hosts killed holding the lock with a temporary file written; %d temporary files found after the round (the surviving host's next save removes them)", rounds, killed, leftovers)
}

// lockHolder returns the pid holding the flock of the file at path (from
// /proc/locks), or 0.
func lockHolder(t *testing.T, path string) int {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0
	}
	locks, err := os.ReadFile("/proc/locks")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(locks), "\n") {
		f := strings.Fields(line)
		// "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"; a waiter's line has "->".
		if len(f) < 6 || f[1] != "FLOCK" || f[1] == "->" {
			continue
		}
		dev := strings.Split(f[5], ":")
		if len(dev) == 3 && dev[2] == strconv.FormatUint(st.Ino, 10) {
			pid, _ := strconv.Atoi(f[4])
			return pid
		}
	}
	return 0
}

// pipedSaver is a saver host whose acknowledgements are read from out.
type pipedSaver struct {
	*exec.Cmd
	out io.Reader
}

// saverPiped starts a host process saving n approvals with prefix to state (see
// runSaver), its stdout piped to the test.
func saverPiped(t *testing.T, state, prefix string, n int) pipedSaver {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s|%s|%d", saverEnv, state, prefix, n))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return pipedSaver{cmd, out}
}
