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
	"slices"
	"strconv"
	"strings"
	"sync"
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
// A Storage is safe for concurrent use, also by several processes sharing the
// directory.
//
// Each placement (Location) has a quota of managed bytes (Limits.MaxRetainedBytes).
// What counts against it is what this Storage retained for that placement — the
// bytes of the files it wrote for it, within this process, across activations —
// while those files exist: before each retention, files of the placement older than
// the retention period are removed and files removed by anyone else stop counting.
// Files other processes or other placements wrote in the same directory never count.
type Storage struct {
	dir       string
	retention time.Duration
	now       func() time.Time

	mu       sync.Mutex
	accounts map[string]*account // per placement id
}

// account is what one placement has retained.
type account struct {
	used  int64 // bytes of files, plus reservations of retentions in progress
	files []retainedFile
}

type retainedFile struct {
	path string
	size int64
	mod  time.Time
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
	s := &Storage{dir: abs, retention: opts.Retention, now: opts.Now, accounts: map[string]*account{}}
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
// error is a *StorageError wrapping the cause. It counts against no quota.
func (s *Storage) retain(src io.WriterTo) (string, error) {
	path, _, err := s.retainTo(src, func(w io.Writer) io.Writer { return w })
	return path, err
}

func (s *Storage) retainTo(src io.WriterTo, wrap func(io.Writer) io.Writer) (string, int64, error) {
	var random [managedSuffixLen / 2]byte
	_, _ = rand.Read(random[:]) // never fails
	path := filepath.Join(s.dir, managedPrefix+hex.EncodeToString(random[:]))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", 0, &StorageError{Op: "retain", Path: path, Err: err}
	}
	n, err := src.WriteTo(wrap(f))
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
		return "", 0, &StorageError{Op: "retain", Path: path, Err: err}
	}
	return path, n, nil
}

// ErrQuotaExceeded is wrapped by the error of a retention that would take a
// placement over its managed-storage quota.
var ErrQuotaExceeded = errors.New("registry: managed storage quota exceeded")

// QuotaError reports a retention refused by a placement's quota; the file was not
// kept. It is the Err of a *StorageError and matches ErrQuotaExceeded.
type QuotaError struct {
	Location string // the placement id; "" is the application
	Quota    int64  // the quota in bytes
	Used     int64  // bytes already retained for the placement
	Dir      string // the managed directory
}

func (e *QuotaError) Error() string {
	who := "Location " + strconv.Quote(e.Location)
	if e.Location == Application {
		who = "the application"
	}
	return fmt.Sprintf("managed storage quota of %d bytes for %s exceeded (%d bytes already retained within the retention period); "+
		"remove managed files from %s or raise tool_output.quota_bytes in the Location config", e.Quota, who, e.Used, e.Dir)
}

func (e *QuotaError) Is(target error) bool { return target == ErrQuotaExceeded }

// Usage returns the bytes counted against location's quota: files this Storage
// retained for it that still exist (as of the last retention or Usage call) and are
// within the retention period, plus retentions in progress.
func (s *Storage) Usage(location string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pruneLocked(location)
	if a := s.accounts[location]; a != nil {
		return a.used
	}
	return 0
}

// pruneLocked removes location's files older than the retention period and forgets
// the ones that no longer exist. The caller holds s.mu.
func (s *Storage) pruneLocked(location string) {
	a := s.accounts[location]
	if a == nil {
		return
	}
	cutoff := s.now().Add(-s.retention)
	a.files = slices.DeleteFunc(a.files, func(f retainedFile) bool {
		gone := false
		if f.mod.Before(cutoff) {
			err := os.Remove(f.path)
			gone = err == nil || errors.Is(err, fs.ErrNotExist)
		} else if _, err := os.Lstat(f.path); errors.Is(err, fs.ErrNotExist) {
			gone = true
		}
		if gone {
			a.used -= f.size
		}
		return gone
	})
}

// quota is a retainer that counts against one placement's quota.
type quota struct {
	s        *Storage
	location string
	max      int64
}

func (s *Storage) forLocation(location string, max int64) quota {
	if max <= 0 {
		max = DefaultMaxRetainedBytes
	}
	return quota{s: s, location: location, max: max}
}

func (q quota) retain(src io.WriterTo) (string, error) {
	s := q.s
	s.mu.Lock()
	s.pruneLocked(q.location)
	a := s.accounts[q.location]
	if a == nil {
		a = &account{}
		s.accounts[q.location] = a
	}
	s.mu.Unlock()
	w := &quotaWriter{q: q, a: a}
	path, n, err := s.retainTo(src, func(f io.Writer) io.Writer { w.w = f; return w })
	s.mu.Lock()
	defer s.mu.Unlock()
	a.used -= w.reserved // the file's bytes are counted again below when it was kept
	if err != nil {
		return "", err
	}
	a.used += n
	a.files = append(a.files, retainedFile{path: path, size: n, mod: s.now()})
	return path, nil
}

// quotaWriter reserves each write's bytes against the account before writing them.
type quotaWriter struct {
	q        quota
	a        *account
	w        io.Writer
	reserved int64
}

func (w *quotaWriter) Write(p []byte) (int, error) {
	s := w.q.s
	s.mu.Lock()
	if w.a.used+int64(len(p)) > w.q.max {
		err := &QuotaError{Location: w.q.location, Quota: w.q.max, Used: w.a.used - w.reserved, Dir: s.dir}
		s.mu.Unlock()
		return 0, err
	}
	w.a.used += int64(len(p))
	w.reserved += int64(len(p))
	s.mu.Unlock()
	return w.w.Write(p)
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
