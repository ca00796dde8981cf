package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// cgroupRoot is the toolhost directory in the cgroup v2 mount, "" when there is
// none this process may use. Found once from /proc/self/mountinfo; directories left
// by dead hosts are removed then.
func cgroupRoot() string {
	cgroupOnce.Do(func() {
		mount := cgroup2Mount()
		if mount == "" {
			return
		}
		root := filepath.Join(mount, "toolhost")
		if err := os.Mkdir(root, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return
		}
		if _, err := os.Stat(filepath.Join(root, "cgroup.kill")); err != nil {
			return // cgroup.kill needs Linux 5.14
		}
		entries, _ := os.ReadDir(root)
		for _, e := range entries {
			// <name>.<host pid>.<n>: a dead host's directories go (a live cgroup's
			// rmdir fails anyway).
			parts := strings.Split(e.Name(), ".")
			if pid, err := strconv.Atoi(parts[len(parts)-2:][0]); e.IsDir() && len(parts) >= 3 && err == nil && syscall.Kill(pid, 0) != nil {
				_ = os.Remove(filepath.Join(root, e.Name()))
			}
		}
		cgroupDir = root
	})
	return cgroupDir
}

var (
	cgroupOnce sync.Once
	cgroupDir  string
	cgroupSeq  atomic.Uint64
)

// CgroupAvailable reports whether a cgroup v2 directory can be made for a source.
func CgroupAvailable() bool { return cgroupRoot() != "" }

// cgroup2Mount finds the cgroup v2 mount point ("" when none).
func cgroup2Mount() string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ... mount-point ... - fstype source options
		left, right, ok := strings.Cut(sc.Text(), " - ")
		if !ok || !strings.HasPrefix(right, "cgroup2 ") {
			continue
		}
		if f := strings.Fields(left); len(f) >= 5 {
			return f[4]
		}
	}
	return ""
}

// newCgroup makes a source's cgroup directory, with pids.max when the pids
// controller is delegated there.
func newCgroup(name string, l Limits) (string, error) {
	root := cgroupRoot()
	if root == "" {
		return "", errors.New("sandbox: no usable cgroup v2 hierarchy")
	}
	safe := strings.Map(func(r rune) rune {
		if r == '/' || r == '.' || r == '\n' {
			return '_'
		}
		return r
	}, name)
	dir := filepath.Join(root, fmt.Sprintf("%s.%d.%d", safe, os.Getpid(), cgroupSeq.Add(1)))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", fmt.Errorf("sandbox: cgroup: %w", err)
	}
	if l.Processes > 0 {
		_ = os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.FormatInt(l.Processes, 10)), 0)
	}
	return dir, nil
}

// removeCgroup kills what is left in dir and removes it, retrying while the killed
// processes exit.
func removeCgroup(dir string) {
	_ = os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
	for range 400 {
		if err := os.Remove(dir); err == nil || errors.Is(err, fs.ErrNotExist) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// cgroupOf returns the cgroup v2 path of pid relative to the mount ("" if unknown).
func cgroupOf(pid int) string {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p
		}
	}
	return ""
}
