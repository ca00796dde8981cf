// Package proctest has what tests share about real processes: it reads the process
// table (/proc) for tests that must show no process was left behind, and waits for
// a state of a real process or of I/O.
package proctest

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// stat is what the tests need of /proc/<pid>/stat.
type stat struct {
	comm       string
	state      string // "R", "S", "Z" (zombie), ...
	ppid, pgrp int
	cpu        time.Duration // utime + stime
}

func readStat(pid string) (stat, bool) {
	data, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return stat{}, false
	}
	// "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return stat{}, false
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return stat{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	pgrp, _ := strconv.Atoi(f[2])
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	cpu := time.Duration(utime+stime) * time.Second / 100 // clock ticks (USER_HZ)
	return stat{comm: string(data[:i+1]), state: f[0], ppid: ppid, pgrp: pgrp, cpu: cpu}, true
}

// CPUTime returns the user plus system CPU time pid has used so far, all its threads
// together, in clock ticks of 10 ms; 0 if pid does not exist. pid 0 means this
// process.
func CPUTime(pid int) time.Duration {
	name := "self"
	if pid != 0 {
		name = strconv.Itoa(pid)
	}
	s, _ := readStat(name)
	return s.cpu
}

func (s stat) live() bool { return s.state != "Z" && s.state != "X" }

// Running reports whether pid exists and is not a zombie.
func Running(pid int) bool {
	s, ok := readStat(strconv.Itoa(pid))
	return ok && s.live()
}

// Children returns the pids of this process's live children whose argv[0] is binary,
// or that are sandbox launchers (argv[0] "toolhost-sandbox") running binary, sorted.
func Children(binary string) []int {
	entries, _ := os.ReadDir("/proc")
	me := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		s, ok := readStat(e.Name())
		if !ok || !s.live() || s.ppid != me {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		argv0, rest, _ := bytes.Cut(cmdline, []byte{0})
		if argv1, _, _ := bytes.Cut(rest, []byte{0}); string(argv0) == binary || string(argv0) == "toolhost-sandbox" && string(argv1) == binary {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	return pids
}

// Program returns the program a sandbox launcher pid runs (its first child), or pid
// itself when it is not a launcher.
func Program(pid int) int {
	cmdline, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if argv0, _, _ := bytes.Cut(cmdline, []byte{0}); string(argv0) != "toolhost-sandbox" {
		return pid
	}
	data, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "task", strconv.Itoa(pid), "children"))
	if f := strings.Fields(string(data)); len(f) > 0 {
		if child, err := strconv.Atoi(f[0]); err == nil {
			return child
		}
	}
	return pid
}

// GroupMembers lists the live processes of process group pgid.
func GroupMembers(pgid int) []string {
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		s, ok := readStat(e.Name())
		if ok && s.live() && s.pgrp == pgid {
			out = append(out, e.Name()+" "+s.comm)
		}
	}
	return out
}

// AssertGroupGone fails t if process group pgid still has a live member after a
// short wait (SIGKILLed members take a moment to die).
func AssertGroupGone(t testing.TB, pgid int) {
	t.Helper()
	var left []string
	for range 100 {
		if left = GroupMembers(pgid); len(left) == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("process group %d is still alive: %v", pgid, left)
}

// Marked lists the live processes whose command line contains marker (a unique
// argument such as a sleep duration), sorted.
func Marked(marker string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmdline, []byte(marker)) && Running(pid) {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	return pids
}

// Until polls cond until it holds, for a state of a real process or of I/O that no
// channel reports (in-process time is for testing/synctest). It sets no time limit
// of its own: a condition that never holds ends at the test binary's -timeout,
// whose goroutine dump shows the caller. It fails t if t's context ends first.
func Until(t testing.TB, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-t.Context().Done():
			t.Fatal("the test ended before the condition held")
		case <-tick.C:
		}
	}
}

// NewMarker returns a sleep duration in seconds unique to a test, for a program it
// starts to carry as an argument so that Marked finds its processes.
func NewMarker() string { return fmt.Sprintf("%d.%03d", 5000+rand.IntN(4000), rand.IntN(1000)) }

// WaitMarked waits until at least n live processes carry marker and returns them,
// with no time limit of its own (see hosttest.Until).
func WaitMarked(t testing.TB, marker string, n int) []int {
	t.Helper()
	var pids []int
	Until(t, func() bool {
		pids = Marked(marker)
		return len(pids) >= n
	})
	return pids
}

// AssertMarkedGone fails t if a process whose command line contains marker is still
// alive after one second, and kills what is left.
func AssertMarkedGone(t testing.TB, marker string) {
	t.Helper()
	for range 50 {
		if len(Marked(marker)) == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	left := Marked(marker)
	for _, pid := range left {
		if p, err := os.FindProcess(pid); err == nil {
			_ = p.Kill()
		}
	}
	t.Errorf("processes marked %q still alive after a second: %v", marker, left)
}

// InitOf is the host's pid of the init of PID namespace ns (the target of a
// /proc/PID/ns/pid link), or 0: a program in a world of its own sees its own /proc,
// where it is pid 1, and can report only its namespace.
func InitOf(ns string) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, _ := os.Readlink("/proc/" + e.Name() + "/ns/pid"); l != ns {
			continue
		}
		status, _ := os.ReadFile("/proc/" + e.Name() + "/status")
		for line := range strings.Lines(string(status)) {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "NSpid:" && f[len(f)-1] == "1" {
				return pid
			}
		}
	}
	return 0
}
