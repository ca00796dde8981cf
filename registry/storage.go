package registry

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"

	"github.com/toolhost/toolhost/internal/filestore"
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
		return "registry: output storage: " + e.Op + ": " + e.Err.Error() + filestore.Remedy(e.Err)
	}
	return "registry: output storage: " + e.Op + " " + e.Path + ": " + e.Err.Error() + filestore.Remedy(e.Err)
}

func (e *StorageError) Unwrap() error { return e.Err }

// StorageOptions configure OpenStorage. The zero value gives the defaults.
type StorageOptions struct {
	Retention time.Duration    // how long managed files are kept; default 7 days
	Now       func() time.Time // the clock Sweep uses; default time.Now
	Logger    hclog.Logger     // where removed partial files are reported; default hclog.Default()
}

// Storage is the managed output directory, where outputs too large for the provider
// are kept whole. It is one flat directory; every file gets a fresh random name that
// never derives from caller-supplied ids, is created exclusively with mode 0600, and is
// removed by Sweep once older than the retention period. Nothing needs closing.
// A Storage is safe for concurrent use, also by several processes sharing the
// directory.
//
// A retention is atomic: the output is written to a hidden temporary file
// (".tool-output-….partial") that its writer holds a file lock on, and renamed to
// its managed name only once complete and synced, so a managed name never holds a
// partial output. A temporary file whose lock is free was left by a process killed
// mid-write; it is removed (and logged) by the next retention for its placement and
// by Sweep, which OpenStorage runs.
//
// Each placement (Location) has a quota of managed bytes (Limits.MaxRetainedBytes),
// one quota whatever the number of processes: a managed file's name carries a tag
// of its placement, and a retention reserves its bytes, in steps, under the
// placement's lock file in the directory by summing the sizes of the placement's
// files there — whole ones within the retention period (older ones are removed
// then) and the temporary files of retentions in progress, whose size includes
// what they reserved. Files of other placements never count.
type Storage struct {
	dir       string
	retention time.Duration
	now       func() time.Time
	log       hclog.Logger
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
// (mode 0700) if needed. On Unix a directory owned by another user, or that group
// or others may write, is refused (the error wraps filestore.ErrRefused). It checks that a file can be created and removed there, then
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
	// Others who may write the directory could replace a managed file, which the
	// model is told holds a tool's output, with their own.
	if err := filestore.CheckDir(abs); err != nil {
		return nil, &StorageError{Op: "open", Err: err}
	}
	s := &Storage{dir: abs, retention: opts.Retention, now: opts.Now, log: opts.Logger}
	if s.retention == 0 {
		s.retention = defaultRetention
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = hclog.Default()
	}
	if err := s.probe(); err != nil {
		return nil, err
	}
	if err := s.Sweep(); err != nil {
		return nil, err
	}
	return s, nil
}

// probe checks that a file can be created and removed in the directory. The file
// is named as a retention's temporary file and made under the directory's lock, so
// no other process takes it for a dead writer's; if this one dies before removing
// it, a sweep does. Nothing is synced: the file is never meant to last.
func (s *Storage) probe() error {
	var random [managedSuffixLen / 2]byte
	_, _ = rand.Read(random[:]) // never fails
	path := filepath.Join(s.dir, "."+managedPrefix+placementTag(Application)+"-"+hex.EncodeToString(random[:])+partialSuffix)
	lk, err := s.lockPlacement(placementTag(Application))
	if err != nil {
		return err
	}
	defer lk.Close()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return &StorageError{Op: "open", Path: path, Err: err}
	}
	f.Close()
	if err := os.Remove(path); err != nil {
		return &StorageError{Op: "open", Path: path, Err: err}
	}
	return nil
}

// Dir returns the absolute path of the managed directory.
func (s *Storage) Dir() string { return s.dir }

// Sweep removes the managed files whose modification time is older than the retention
// period, and the temporary files of retentions whose process died mid-write (their
// file lock is free), logging each of those. It considers only regular files named
// the way Storage names them, never any other file. It keeps going past failures and
// returns them joined, each a *StorageError. Files another sweep removed first are not
// failures.
func (s *Storage) Sweep() error {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return &StorageError{Op: "sweep", Path: s.dir, Err: err}
	}
	cutoff := s.now().Add(-s.retention)
	var errs []error
	partial := map[string]bool{} // tags with temporary files
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		if tag, ok := partialTag(e.Name()); ok {
			partial[tag] = true
			continue
		}
		if _, ok := managedTag(e.Name()); !ok {
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
	for tag := range partial {
		if _, err := s.usage(tag); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// retain writes everything src writes to a new managed file and returns the file's
// absolute path. src streams into a temporary file, which is synced and renamed to
// the managed name before retain returns. On failure nothing is left behind and the
// error is a *StorageError wrapping the cause. It counts against no quota.
func (s *Storage) retain(src io.WriterTo) (string, error) {
	return s.forLocation(Application, math.MaxInt64).retain(src)
}

// tagLen is the length of a placement's tag in managed names.
const tagLen = 16

// placementTag is the tag of the placement id in managed names: hex of the first
// bytes of its SHA-256.
func placementTag(location string) string {
	sum := sha256.Sum256([]byte(location))
	return hex.EncodeToString(sum[:tagLen/2])
}

// lockFileName is the lock file of the directory's accounting.
const lockFileName = ".tool-output.lock"

// lockPlacement takes the lock of the placement tag's accounting, across processes:
// the directory's one lock file, held briefly.
func (s *Storage) lockPlacement(string) (*os.File, error) {
	path := filepath.Join(s.dir, lockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, &StorageError{Op: "retain", Path: path, Err: err}
	}
	if err := filestore.LockFile(f); err != nil {
		f.Close()
		return nil, &StorageError{Op: "retain", Path: path, Err: err}
	}
	return f, nil
}

// usage locks the placement tag and returns its usage (see usageLocked).
func (s *Storage) usage(tag string) (int64, error) {
	lk, err := s.lockPlacement(tag)
	if err != nil {
		return 0, err
	}
	defer lk.Close()
	return s.usageLocked(tag)
}

// usageLocked returns the bytes the placement tag holds in the directory: its
// managed files within the retention period, after removing older ones, and the
// temporary files of retentions in progress. A temporary file whose lock is free
// was left by a dead process: it is removed and logged. The tag's lock is held.
func (s *Storage) usageLocked(tag string) (int64, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return 0, &StorageError{Op: "retain", Path: s.dir, Err: err}
	}
	cutoff := s.now().Add(-s.retention)
	var used int64
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() {
			continue
		}
		path := filepath.Join(s.dir, name)
		if t, ok := partialTag(name); ok && t == tag {
			size, _ := s.checkPartial(path)
			used += size
			continue
		}
		if t, ok := managedTag(name); !ok || t != tag {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		if info.ModTime().Before(cutoff) {
			if err := os.Remove(path); err == nil || errors.Is(err, fs.ErrNotExist) {
				continue
			}
		}
		used += info.Size()
	}
	return used, nil
}

// checkPartial returns the size of the temporary file path and whether a live
// retention writes it; one whose writer died is removed, and logged.
func (s *Storage) checkPartial(path string) (size int64, live bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return 0, false
	}
	if ok, err := filestore.TryLockFile(f); err != nil || !ok {
		return info.Size(), true
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Warn("could not remove a partial output file left by a host that stopped while writing it", "path", path, "error", err)
		return info.Size(), true
	}
	s.log.Warn("removed a partial output file left by a host that stopped while writing it", "path", path, "bytes", info.Size())
	return 0, false
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

// Usage returns the bytes counted against location's quota, by every process
// sharing the directory: the placement's managed files within the retention period,
// plus retentions in progress (with what they reserved).
func (s *Storage) Usage(location string) (int64, error) {
	return s.usage(placementTag(location))
}

// quota is a retainer that counts against one placement's quota.
type quota struct {
	s        *Storage
	location string
	tag      string
	max      int64
}

func (s *Storage) forLocation(location string, max int64) quota {
	if max <= 0 {
		max = DefaultMaxRetainedBytes
	}
	return quota{s: s, location: location, tag: placementTag(location), max: max}
}

// reserveStep is how many bytes a retention reserves against its quota at a time
// (less when less is left, or the quota is small; more for a larger write): each
// step takes the directory's lock and reads the directory once.
const reserveStep = 1 << 20

func (q quota) retain(src io.WriterTo) (path string, err error) {
	s := q.s
	var random [managedSuffixLen / 2]byte
	_, _ = rand.Read(random[:]) // never fails
	name := managedPrefix + q.tag + "-" + hex.EncodeToString(random[:])
	path = filepath.Join(s.dir, name)
	tmp := filepath.Join(s.dir, "."+name+partialSuffix)

	// Created and locked under the placement's lock, so no one takes it for a
	// dead process's leftover in between.
	lk, err := s.lockPlacement(q.tag)
	if err != nil {
		return "", err
	}
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		if err = filestore.LockFile(f); err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}
	lk.Close()
	if err != nil {
		return "", &StorageError{Op: "retain", Path: tmp, Err: err}
	}
	defer func() {
		if err != nil {
			if rerr := os.Remove(tmp); rerr != nil {
				err = errors.Join(err, rerr)
			}
			f.Close()
			// Named by its directory: neither file is left.
			err = &StorageError{Op: "retain", Path: s.dir, Err: err}
		}
	}()
	w := &quotaWriter{q: q, f: f}
	n, err := src.WriteTo(w)
	if err != nil {
		return "", err
	}
	if err := f.Truncate(n); err != nil { // what was reserved and not written
		return "", err
	}
	if err := f.Sync(); err != nil {
		return "", err
	}
	// Sweep and the quota age files by the Storage's clock.
	if now := s.now(); !now.IsZero() {
		if err := os.Chtimes(tmp, now, now); err != nil {
			return "", err
		}
	}
	if lk, err = s.lockPlacement(q.tag); err != nil {
		return "", err
	}
	err = os.Rename(tmp, path)
	lk.Close()
	if err != nil {
		return "", err
	}
	f.Close() // the lock goes with it; the file is whole under its managed name
	if err := filestore.SyncDir(s.dir); err != nil {
		return "", &StorageError{Op: "retain", Path: s.dir, Err: err}
	}
	return path, nil
}

// quotaWriter writes a retention's temporary file, reserving bytes against the
// quota before writing them: a reservation grows the file (sparse), so every
// process summing the placement's files counts it.
type quotaWriter struct {
	q        quota
	f        *os.File
	written  int64
	reserved int64
}

func (w *quotaWriter) Write(p []byte) (int, error) {
	if need := w.written + int64(len(p)) - w.reserved; need > 0 {
		if err := w.reserve(need); err != nil {
			return 0, err
		}
	}
	n, err := w.f.Write(p)
	w.written += int64(n)
	return n, err
}

// WriteString is Write without copying s to a []byte.
func (w *quotaWriter) WriteString(str string) (int, error) {
	if need := w.written + int64(len(str)) - w.reserved; need > 0 {
		if err := w.reserve(need); err != nil {
			return 0, err
		}
	}
	n, err := w.f.WriteString(str)
	w.written += int64(n)
	return n, err
}

// reserve reserves at least need more bytes, up to a reserveStep, or fails with a
// *QuotaError when the quota has less left.
func (w *quotaWriter) reserve(need int64) error {
	s := w.q.s
	lk, err := s.lockPlacement(w.q.tag)
	if err != nil {
		return err
	}
	defer lk.Close()
	used, err := s.usageLocked(w.q.tag) // includes what this retention reserved
	if err != nil {
		return err
	}
	left := w.q.max - used
	if left < need {
		return &QuotaError{Location: w.q.location, Quota: w.q.max, Used: used - w.reserved, Dir: s.dir}
	}
	// A step is at most 1/64 of the quota, so retentions in progress hold back
	// little of it beyond what they wrote.
	grant := min(max(need, min(reserveStep, w.q.max/64)), left)
	if err := w.f.Truncate(w.reserved + grant); err != nil {
		return err
	}
	w.reserved += grant
	return nil
}

// partialSuffix ends the name of a retention's temporary file, "." + the managed
// name + partialSuffix.
const partialSuffix = ".partial"

// managedTag reports whether name has the form of a managed file, and returns its
// placement tag: "tool-output-" + tag + "-" + random hex. The older form without a
// tag (which Sweep still removes when old) has tag "".
func managedTag(name string) (tag string, ok bool) {
	rest, ok := strings.CutPrefix(name, managedPrefix)
	if !ok {
		return "", false
	}
	if len(rest) == tagLen+1+managedSuffixLen && rest[tagLen] == '-' && isLowerHex(rest[:tagLen]) && isLowerHex(rest[tagLen+1:]) {
		return rest[:tagLen], true
	}
	return "", len(rest) == managedSuffixLen && isLowerHex(rest)
}

// partialTag reports whether name is a retention's temporary file, and its tag.
func partialTag(name string) (tag string, ok bool) {
	rest, ok := strings.CutPrefix(name, ".")
	if !ok {
		return "", false
	}
	if rest, ok = strings.CutSuffix(rest, partialSuffix); !ok {
		return "", false
	}
	tag, ok = managedTag(rest)
	return tag, ok && tag != ""
}

// isManagedName reports whether name has the form of a file retain creates.
func isManagedName(name string) bool {
	_, ok := managedTag(name)
	return ok
}

func isLowerHex(s string) bool {
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
