//go:build !linux && unix

package sandbox

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"
)

// treeMode holds a tree together off Linux on unix systems: the program leads a
// process group, killed whole at the end, and a watcher process kills that group
// when the host dies, by any signal. A descendant that leaves the group (setsid,
// setpgid) escapes both.
const treeMode Mode = "process-group"

// ModeProcessGroup is treeMode on macOS and other unix systems.
const ModeProcessGroup = treeMode

func prepareTree(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// tree is a started program's process group and its watcher.
type tree struct {
	pgid    int
	watcher *exec.Cmd
}

// watchScript waits for the host ($1) to go, then kills the group ($2). It polls
// once a second: the host may die by SIGKILL, which no exit hook sees.
const watchScript = `while kill -0 "$1" 2>/dev/null; do sleep 1; done; kill -KILL -"$2" 2>/dev/null`

func containTree(p *os.Process) (*tree, error) {
	w := exec.Command("/bin/sh", "-c", watchScript, "toolhost-watch", strconv.Itoa(os.Getpid()), strconv.Itoa(p.Pid))
	w.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // not in the group it kills, nor the host's
	w.Env = []string{"PATH=/usr/bin:/bin"}
	if err := w.Start(); err != nil {
		_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
		return nil, err
	}
	return &tree{pgid: p.Pid, watcher: w}, nil
}

// signalTree sends sig to the program's process group.
func signalTree(p *os.Process, sig syscall.Signal) {
	_ = syscall.Kill(-p.Pid, sig)
	_ = syscall.Kill(p.Pid, sig)
}

func (t *tree) kill() { _ = syscall.Kill(-t.pgid, syscall.SIGKILL) }

// close ends the watcher.
func (t *tree) close() {
	_ = t.watcher.Process.Kill()
	_ = t.watcher.Wait()
}
