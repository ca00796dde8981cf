package registry

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"
)

const (
	defaultRetention = 7 * 24 * time.Hour

	// managedPrefix starts the name of every file Storage creates; a random hex
	// suffix of managedSuffixLen digits completes it. Sweep touches no other name.
	managedPrefix    = "tool-output-"
	managedSuffixLen = 32

	// maxStorageDirLen caps the directory path so that the truncation marker, which
	// names a managed file, always fits the smallest Limits (see minMaxBytes).
	maxStorageDirLen = 512
)

// StorageError reports a failed managed-storage operation. Err is the cause; Unwrap
// exposes it, so errors.Is sees e.g. syscall.ENOSPC or fs.ErrPermission.
type StorageError struct {
	Op   string // "open", "retain" or "sweep"
	Path string // the directory or file concerned
	Err  error
}

func (e *StorageError) Error() string {
	if e.Path == "" {
		return "registry: output storage: " + e.Op + ": " + e.Err.Error()
	}
	return "registry: output storage: " + e.Op + " " + e.Path + ": " + e.Err.Error()
}

func (e *StorageError) Unwrap() error { return e.Err }

// StorageOptions configure OpenStorage. The zero value gives the defaults.
type StorageOptions struct {
	Retention time.Duration    // how long managed files are kept; default 7 days
	Now       func() time.Time // the clock Sweep uses; default time.Now
}

// Storage is the managed output directory, where outputs too large for the provider
// are kept whole. It is one flat directory; every file gets a fresh random name that
// never derives from caller-supplied ids, is created exclusively with mode 0600, and is
// removed by Sweep once older than the retention period. Nothing needs closing.
// A Storage is immutable after OpenStorage and safe for concurrent use, also by
// several processes sharing the directory.
type Storage struct {
	dir       string
	retention time.Duration
	now       func() time.Time
}

// DefaultStorageDir returns the managed output directory: $TOOLHOST_OUTPUT_DIR if set,
// else $XDG_DATA_HOME/toolhost/tool-output if XDG_DATA_HOME is an absolute path, else
// $HOME/.local/share/toolhost/tool-output. It creates nothing.
func DefaultStorageDir() (string, error) {
	if dir := os.Getenv("TOOLHOST_OUTPUT_DIR"); dir != "" {
		return dir, nil
	}
	if data := os.Getenv("XDG_DATA_HOME"); filepath.IsAbs(data) {
		return filepath.Join(data, "toolhost", "tool-output"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("registry: output storage directory: %w", err)
	}
	return filepath.Join(home, ".local", "share", "toolhost", "tool-output"), nil
}

// OpenStorage opens the managed output directory dir, creating it and its parents
// (mode 0700) if needed. It checks that a file can be created and removed there, then
// runs one Sweep; any failure, the sweep's included, is returned as a *StorageError and
// no Storage. The absolute path of dir must be valid UTF-8, contain no newline and be
// at most 512 bytes long, because previews name managed files in their marker.
func OpenStorage(dir string, opts StorageOptions) (*Storage, error) {
	if dir == "" {
		return nil, &StorageError{Op: "open", Err: errors.New("empty directory path")}
	}
	if opts.Retention < 0 {
		return nil, &StorageError{Op: "open", Path: dir, Err: fmt.Errorf("negative retention %v", opts.Retention)}
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, &StorageError{Op: "open", Path: dir, Err: err}
	}
	if len(abs) > maxStorageDirLen || strings.Contains(abs, "\n") || !utf8.ValidString(abs) {
		return nil, &StorageError{Op: "open", Path: abs, Err: fmt.Errorf(
			"path must be valid UTF-8 without newlines and at most %d bytes", maxStorageDirLen)}
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, &StorageError{Op: "open", Path: abs, Err: err}
	}
	s := &Storage{dir: abs, retention: opts.Retention, now: opts.Now}
	if s.retention == 0 {
		s.retention = defaultRetention
	}
	if s.now == nil {
		s.now = time.Now
	}
	probe, err := s.retain(strings.NewReader(""))
	if err != nil {
		return nil, err
	}
	if err := os.Remove(probe); err != nil {
		return nil, &StorageError{Op: "open", Path: probe, Err: err}
	}
	if err := s.Sweep(); err != nil {
		return nil, err
	}
	return s, nil
}

// Dir returns the absolute path of the managed directory.
func (s *Storage) Dir() string { return s.dir }

// Sweep removes the managed files whose modification time is older than the retention
// period. It considers only regular files named the way Storage names them, never any
// other file. It keeps going past failures and returns them joined, each a
// *StorageError. Files another sweep removed first are not failures.
func (s *Storage) Sweep() error {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return &StorageError{Op: "sweep", Path: s.dir, Err: err}
	}
	cutoff := s.now().Add(-s.retention)
	var errs []error
	for _, e := range entries {
		if !e.Type().IsRegular() || !isManagedName(e.Name()) {
			continue
		}
		path := filepath.Join(s.dir, e.Name())
		info, err := e.Info()
		if err == nil && info.ModTime().Before(cutoff) {
			err = os.Remove(path)
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, &StorageError{Op: "sweep", Path: path, Err: err})
		}
	}
	return errors.Join(errs...)
}

// retain writes everything src writes to a new managed file and returns the file's
// absolute path. src streams straight into the file, which is created exclusively with
// mode 0600 and synced before retain returns. On failure nothing is left behind and the
// error is a *StorageError wrapping the cause.
func (s *Storage) retain(src io.WriterTo) (string, error) {
	var random [managedSuffixLen / 2]byte
	_, _ = rand.Read(random[:]) // never fails
	path := filepath.Join(s.dir, managedPrefix+hex.EncodeToString(random[:]))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", &StorageError{Op: "retain", Path: path, Err: err}
	}
	_, err = src.WriteTo(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if rerr := os.Remove(path); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return "", &StorageError{Op: "retain", Path: path, Err: err}
	}
	return path, nil
}

// isManagedName reports whether name has the form of a file retain creates.
func isManagedName(name string) bool {
	suffix, ok := strings.CutPrefix(name, managedPrefix)
	if !ok || len(suffix) != managedSuffixLen {
		return false
	}
	for _, c := range []byte(suffix) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
