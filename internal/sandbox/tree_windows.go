//go:build windows

package sandbox

import (
	"os"
	"os/exec"
	"syscall"
	"unsafe"

	"golang.org/x/sys/windows"
)

// treeMode holds a tree together on Windows: the program is assigned to a Job
// Object with JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE, which its children join, so the
// tree ends when the box ends it and when the host's last handle to the job closes,
// however the host dies. A process the program starts before it is assigned (just
// after it starts) is outside the job.
const treeMode Mode = "job"

// ModeJob is treeMode on Windows.
const ModeJob = treeMode

func prepareTree(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{CreationFlags: windows.CREATE_NEW_PROCESS_GROUP}
}

// tree is a started program's Job Object.
type tree struct{ job windows.Handle }

func containTree(p *os.Process) (*tree, error) {
	job, err := windows.CreateJobObject(nil, nil)
	if err != nil {
		return nil, err
	}
	info := windows.JOBOBJECT_EXTENDED_LIMIT_INFORMATION{}
	info.BasicLimitInformation.LimitFlags = windows.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
	if _, err := windows.SetInformationJobObject(job, windows.JobObjectExtendedLimitInformation,
		uintptr(unsafe.Pointer(&info)), uint32(unsafe.Sizeof(info))); err != nil {
		windows.CloseHandle(job)
		return nil, err
	}
	h, err := windows.OpenProcess(windows.PROCESS_SET_QUOTA|windows.PROCESS_TERMINATE, false, uint32(p.Pid))
	if err != nil {
		windows.CloseHandle(job)
		return nil, err
	}
	defer windows.CloseHandle(h)
	if err := windows.AssignProcessToJobObject(job, h); err != nil {
		windows.CloseHandle(job)
		return nil, err
	}
	return &tree{job: job}, nil
}

// signalTree ends the tree: Windows has no signal a program can handle for a
// graceful stop.
func signalTree(p *os.Process, _ syscall.Signal) { _ = p.Kill() }

func (t *tree) kill() { _ = windows.TerminateJobObject(t.job, 1) }

// close closes the job, which kills what is left in it.
func (t *tree) close() { _ = windows.CloseHandle(t.job) }
