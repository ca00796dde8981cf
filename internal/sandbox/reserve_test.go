//go:build linux

package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
)

func TestReserveKeepsAtMostItsSize(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var made, dropped int
		r := reserve[int]{
			make: func() (int, bool) { mu.Lock(); defer mu.Unlock(); made++; return -made, true },
			drop: func(v int) { mu.Lock(); defer mu.Unlock(); dropped++ },
		}
		if _, ok := r.take(); ok {
			t.Fatal("an empty reserve gave a resource")
		}
		// The take above made one ahead, in the background.
		synctest.Wait()
		if v, ok := r.take(); !ok || v != -1 {
			t.Fatalf("took %d, %v; want the one made ahead (-1)", v, ok)
		}
		synctest.Wait() // that take, too, made one ahead
		r.mu.Lock()
		held := len(r.ready)
		r.mu.Unlock()
		for i := range reserveSize + 3 {
			r.put(i)
		}
		mu.Lock()
		defer mu.Unlock()
		if want := held + reserveSize + 3 - reserveSize; dropped != want {
			t.Errorf("dropped %d of %d given back with %d held, want %d", dropped, reserveSize+3, held, want)
		}
	})
}

// A processes cgroup from the reserve has the cap asked for, and one that still
// holds a process is not given back (on cgroup v2 it is also killed; on v1 the
// namespace's end kills it).
func TestPidsCgroupRecycling(t *testing.T) {
	if !PidsCgroupAvailable() {
		t.Skip("no processes cgroup can be made here")
	}
	first := newPidsCgroup(Limits{Processes: 5})
	if first == "" {
		t.Fatal("no cgroup")
	}
	recyclePidsCgroup(first, 5)
	second := newPidsCgroup(Limits{Processes: 50})
	if got, _ := os.ReadFile(filepath.Join(second, "pids.max")); strings.TrimSpace(string(got)) != "50" {
		t.Errorf("pids.max of %s: %q, want 50", second, got)
	}

	// Put a process in it and give it back while it runs.
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(second, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
		removeCgroup(second)
	}()
	recyclePidsCgroup(second, 50)
	pidsCgroups.mu.Lock()
	defer pidsCgroups.mu.Unlock()
	for _, c := range pidsCgroups.ready {
		if c.dir == second {
			t.Errorf("%s holds a process and was given back to the reserve", second)
		}
	}
}

// DropReserves leaves no directory of this host's in the temporary directory.
func TestDropReserves(t *testing.T) {
	dir, err := privateTempDir() // and one made ahead
	if err != nil {
		t.Fatal(err)
	}
	recycleTempDir(dir)
	DropReserves()
	entries, _ := os.ReadDir(os.TempDir())
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tempPrefix()) {
			t.Errorf("%s is still there", e.Name())
		}
	}
}
