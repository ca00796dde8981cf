package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// reachInput says what the "reach" tool tries: what a process reaches that is not a
// file path (System V and POSIX IPC, the host's process group, its terminal).
type reachInput struct {
	ShmKey   int    `json:"shm_key"`   // a System V shared memory key the host made
	ShmID    *int   `json:"shm_id"`    // its id, for shmat without shmget (0 is an id)
	MsgKey   int    `json:"msg_key"`   // a System V message queue key the host made
	SemKey   int    `json:"sem_key"`   // a System V semaphore set key the host made
	MQ       string `json:"mq"`        // a POSIX message queue name the host made (no slash)
	HostPGID int    `json:"host_pgid"` // the host's process group
	Signal   int    `json:"signal"`    // what to send it (SIGCONT unless set)
}

// reachOS tries each, one line per attempt: "ok ..." when it worked, else
// "denied: ERROR".
func reachOS(in reachInput) map[string]string {
	r := map[string]string{}
	try := func(what string, err error) {
		if err != nil {
			r[what] = "denied: " + err.Error()
		} else {
			r[what] = "ok: SUCCEEDED"
		}
	}
	readShm := func(what string, id int) {
		b, err := unix.SysvShmAttach(id, 0, 0)
		if err != nil {
			try(what, err)
			return
		}
		r[what] = fmt.Sprintf("ok: READ %q", string(b[:min(len(b), 32)]))
		unix.SysvShmDetach(b)
	}
	if in.ShmKey != 0 {
		if id, err := unix.SysvShmGet(in.ShmKey, 0, 0); err != nil {
			try("shmget the host's segment", err)
		} else {
			readShm("shmget the host's segment", id)
		}
	}
	if in.ShmID != nil {
		readShm("shmat the host's segment by id", *in.ShmID)
	}
	if in.MsgKey != 0 {
		_, _, e := unix.Syscall(unix.SYS_MSGGET, uintptr(in.MsgKey), 0, 0)
		try("msgget the host's queue", errnoErr(e))
	}
	if in.SemKey != 0 {
		_, _, e := unix.Syscall(unix.SYS_SEMGET, uintptr(in.SemKey), 0, 0)
		try("semget the host's semaphores", errnoErr(e))
	}
	if in.MQ != "" {
		name, _ := unix.BytePtrFromString(in.MQ)
		fd, _, e := unix.Syscall6(unix.SYS_MQ_OPEN, uintptr(unsafe.Pointer(name)), unix.O_RDWR, 0, 0, 0, 0)
		if e == 0 {
			unix.Close(int(fd))
		}
		try("mq_open the host's queue", errnoErr(e))
	}
	// A queue and a segment of its own, which another plugin or the host could find.
	if id, err := unix.SysvShmGet(0x7057117e, 4096, unix.IPC_CREAT|0o666); err == nil {
		r["shmget a segment of its own"] = "ok: SUCCEEDED"
		unix.SysvShmCtl(id, unix.IPC_RMID, nil)
	} else {
		try("shmget a segment of its own", err)
	}
	name, _ := unix.BytePtrFromString("hostile-queue")
	if fd, _, e := unix.Syscall6(unix.SYS_MQ_OPEN, uintptr(unsafe.Pointer(name)), unix.O_RDWR|unix.O_CREAT, 0o666, 0, 0, 0); e == 0 {
		unix.Close(int(fd))
		unix.Syscall(unix.SYS_MQ_UNLINK, uintptr(unsafe.Pointer(name)), 0, 0)
		r["mq_open a queue of its own"] = "ok: SUCCEEDED"
	} else {
		try("mq_open a queue of its own", e)
	}

	// The host's process group and session: join it, signal it.
	if in.HostPGID != 0 {
		try(fmt.Sprint("setpgid into the host's group ", in.HostPGID), unix.Setpgid(0, in.HostPGID))
		sig := syscall.SIGCONT
		if in.Signal != 0 {
			sig = syscall.Signal(in.Signal)
		}
		signal.Ignore(sig) // it may be in that group now
		try(fmt.Sprint("killpg the host's group ", in.HostPGID), unix.Kill(-in.HostPGID, sig))
	}
	// Its terminal: push a command into the input of any terminal it holds or finds.
	for _, p := range []string{"/dev/tty", "/dev/console", "/dev/tty0", "/dev/ptmx"} {
		f, err := os.OpenFile(p, os.O_RDWR|unix.O_NOCTTY, 0)
		if err != nil {
			try("open "+p, err)
			continue
		}
		r["open "+p] = "ok: OPENED"
		try("TIOCSTI on "+p, inject(int(f.Fd())))
		f.Close()
	}
	for fd := range 3 {
		if err := inject(fd); err != unix.ENOTTY {
			try(fmt.Sprint("TIOCSTI on its descriptor ", fd), err)
		}
	}
	return r
}

// inject pushes "id\n" into the input of the terminal fd is, as if typed (TIOCSTI).
func inject(fd int) error {
	for _, c := range []byte("id\n") {
		if err := unix.IoctlSetPointerInt(fd, unix.TIOCSTI, int(c)); err != nil {
			return err
		}
	}
	return nil
}

func errnoErr(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}
