//go:build unix

package filestore

import (
	"errors"
	"os"
	"syscall"
)

// LockFile takes an exclusive advisory lock (flock) on f, blocking until it holds
// it. Closing every descriptor of f releases it, as does the process ending.
func LockFile(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// UnlockFile releases the lock LockFile took on f, which stays open.
func UnlockFile(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
}

// TryLockFile is LockFile without waiting: false when another holds the lock.
func TryLockFile(f *os.File) (bool, error) {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return false, nil
	}
	return err == nil, err
}

// SyncDir syncs the directory dir, making a rename in it durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// The errors Remedy knows.
var (
	errNoSpace  error = syscall.ENOSPC
	errQuota    error = syscall.EDQUOT
	errReadOnly error = syscall.EROFS
	errIO       error = syscall.EIO
)
