//go:build windows

package filestore

import (
	"errors"
	"os"

	"golang.org/x/sys/windows"
)

// LockFile takes an exclusive lock (LockFileEx) on f, blocking until it holds it.
// Closing f releases it, as does the process ending.
func LockFile(f *os.File) error {
	var ol windows.Overlapped
	return windows.LockFileEx(windows.Handle(f.Fd()), windows.LOCKFILE_EXCLUSIVE_LOCK, 0, 1, 0, &ol)
}

// UnlockFile releases the lock LockFile took on f, which stays open.
func UnlockFile(f *os.File) error {
	var ol windows.Overlapped
	return windows.UnlockFileEx(windows.Handle(f.Fd()), 0, 1, 0, &ol)
}

// TryLockFile is LockFile without waiting: false when another holds the lock.
func TryLockFile(f *os.File) (bool, error) {
	var ol windows.Overlapped
	err := windows.LockFileEx(windows.Handle(f.Fd()), windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, &ol)
	if errors.Is(err, windows.ERROR_LOCK_VIOLATION) {
		return false, nil
	}
	return err == nil, err
}

// SyncDir does nothing on Windows, where a directory cannot be synced; a rename
// there is made durable by the file system's journal.
func SyncDir(string) error { return nil }

// The errors Remedy knows.
var (
	errNoSpace  error = windows.ERROR_DISK_FULL
	errQuota    error = windows.ERROR_DISK_QUOTA_EXCEEDED
	errReadOnly error = windows.ERROR_WRITE_PROTECT
	errIO       error = windows.ERROR_IO_DEVICE
)
