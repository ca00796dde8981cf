//go:build linux

package location_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/toolhost/toolhost/internal/sandbox"
)

// TestHostilePluginReachesNoHostIPC: what a process reaches that is not a file
// path. The host holds a System V shared memory segment (with a secret), message
// queue and semaphore set, and a POSIX message queue; the hostile plugin, confined,
// tries to open each by its key or name (the segment by its id too, which shmat
// takes without shmget), to make objects of its own where the host and other
// plugins would find them, and to join and signal the host's process group. Every
// attempt fails, in a world of its own (its own IPC and PID namespaces) and in the
// fallback without one (where no namespace separates them), and a well-behaved
// plugin keeps working beside it.
func TestHostilePluginReachesNoHostIPC(t *testing.T) {
	bin := buildHostile(t)
	if sandbox.LandlockABI() == 0 {
		t.Skip("this kernel has no Landlock: an untrusted plugin runs unconfined")
	}
	key := int(rand.Int32N(1<<30)) + 1
	shm, err := unix.SysvShmGet(key, 4096, unix.IPC_CREAT|unix.IPC_EXCL|0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.SysvShmCtl(shm, unix.IPC_RMID, nil) })
	mem, err := unix.SysvShmAttach(shm, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	copy(mem, "the host's secret")
	unix.SysvShmDetach(mem)
	msg, _, e := unix.Syscall(unix.SYS_MSGGET, uintptr(key), unix.IPC_CREAT|unix.IPC_EXCL|0o600, 0)
	if e != 0 {
		t.Fatal("msgget:", e)
	}
	t.Cleanup(func() { unix.Syscall(unix.SYS_MSGCTL, msg, unix.IPC_RMID, 0) })
	sem, _, e := unix.Syscall(unix.SYS_SEMGET, uintptr(key), 1, unix.IPC_CREAT|unix.IPC_EXCL|0o600)
	if e != 0 {
		t.Fatal("semget:", e)
	}
	t.Cleanup(func() { unix.Syscall6(unix.SYS_SEMCTL, sem, 0, unix.IPC_RMID, 0, 0, 0) })
	mq := fmt.Sprintf("toolhost-test-%d", key)
	name, _ := unix.BytePtrFromString(mq)
	fd, _, e := unix.Syscall6(unix.SYS_MQ_OPEN, uintptr(unsafe.Pointer(name)), unix.O_RDWR|unix.O_CREAT|unix.O_EXCL, 0o600, 0, 0, 0)
	if e != 0 {
		t.Fatal("mq_open:", e)
	}
	unix.Close(int(fd))
	t.Cleanup(func() { unix.Syscall(unix.SYS_MQ_UNLINK, uintptr(unsafe.Pointer(name)), 0, 0) })

	for _, world := range []bool{true, false} {
		name := "World"
		if !world {
			name = "Fallback"
		}
		t.Run(name, func(t *testing.T) {
			if !world {
				t.Setenv(sandbox.OffEnv, "world")
			} else if ok, why := sandbox.WorldAvailable(); !ok {
				t.Skip("no world here: " + why)
			}
			e := newEnv(t)
			e.opts.SocketDir = shortDir(t)
			l := e.activate(t, workspace(t, pluginsConfig(echoPlugin("echo"), obj{"name": "hostile", "path": bin})))
			in, _ := json.Marshal(obj{"shm_key": key, "shm_id": shm, "msg_key": key, "sem_key": key, "mq": mq, "host_pgid": syscall.Getpgrp()})
			r := report(t, l, "reach", string(in))
			for _, k := range slices.Sorted(maps.Keys(r)) {
				v := r[k]
				t.Logf("%-60s %s", k, v)
				// In a world, what it makes is in its own IPC namespace: no one else's.
				if world && strings.HasSuffix(k, " of its own") {
					continue
				}
				if !strings.HasPrefix(v, "denied: ") {
					t.Errorf("%s: %s", k, v)
				}
			}
			for _, want := range []string{"shmget the host's segment", "shmat the host's segment by id", "msgget the host's queue",
				"semget the host's semaphores", "mq_open the host's queue", "shmget a segment of its own", "mq_open a queue of its own",
				fmt.Sprint("setpgid into the host's group ", syscall.Getpgrp())} {
				if _, ok := r[want]; !ok {
					t.Errorf("no attempt %q", want)
				}
			}
			if out := callEcho(t, l, "still here"); out.Text != "still here" {
				t.Errorf("the well-behaved plugin: %+v", out)
			}
		})
	}
}
