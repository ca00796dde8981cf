package location

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/toolhost/toolhost/internal/filestore"
)

// LockPath is the lock file's path relative to a Location directory: beside the
// config, it records the exact version and hash of every plugin given as a Go module.
const LockPath = ".toolhost/plugins.lock.json"

// lockFormat is the lock file's format version; a file of another version is refused.
const lockFormat = 1

// Lock is the decoded lock file of a Location (see LockPath). It is a plain value.
type Lock struct {
	// Plugins maps a plugin's name to what was resolved for it.
	Plugins map[string]LockedModule
}

// LockedModule is what a module plugin's entry resolved to, once.
type LockedModule struct {
	// Package is the config's "module": the main package that is built.
	Package string `json:"package"`
	// Query is the config's "version" when it was resolved ("v1", "latest", "v1.2.3").
	Query string `json:"query"`
	// Module and Version are the module providing Package and its exact version.
	Module  string `json:"module"`
	Version string `json:"version"`
	// Hash is the module's h1: hash (its go.sum line), which every later fetch must
	// match; GoModHash is its go.mod's.
	Hash      string `json:"hash"`
	GoModHash string `json:"go_mod_hash,omitempty"`
	// Go is the go command's version that resolved it (informational: the binary
	// cache is keyed by the version that builds).
	Go string `json:"go"`
}

// matches reports whether the entry was resolved for the plugin as configured now.
func (m LockedModule) matches(pc PluginConfig) bool {
	return m.Package == pc.Module && m.Query == pc.Version
}

type lockFile struct {
	Version int                     `json:"version"`
	Plugins map[string]LockedModule `json:"plugins"`
}

// ReadLock reads <dir>/.toolhost/plugins.lock.json. A missing file is an empty Lock.
// A file that does not decode, or of another format version, is an error naming it.
func ReadLock(dir string) (*Lock, error) {
	file := filepath.Join(dir, filepath.FromSlash(LockPath))
	data, err := workspaceFile.ReadFile(file) // nil when missing
	if err != nil {
		return nil, fmt.Errorf("location: read lock file: %w", err)
	}
	return decodeLock(file, data)
}

// decodeLock decodes the contents of the lock file file; nil is an empty Lock.
func decodeLock(file string, data []byte) (*Lock, error) {
	if data == nil {
		return &Lock{Plugins: map[string]LockedModule{}}, nil
	}
	var lf lockFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&lf); err != nil {
		return nil, fmt.Errorf("location: lock file %s: %w", file, err)
	}
	if lf.Version != lockFormat {
		return nil, fmt.Errorf("location: lock file %s: format version %d, want %d", file, lf.Version, lockFormat)
	}
	if lf.Plugins == nil {
		lf.Plugins = map[string]LockedModule{}
	}
	return &Lock{Plugins: lf.Plugins}, nil
}

// WriteLock replaces <dir>/.toolhost/plugins.lock.json with l, atomically (a reader
// sees the old file or the new one). Entries are sorted by plugin name, so the file
// diffs well in version control. It takes the file's lock, as UpdateLock does.
func WriteLock(dir string, l *Lock) error {
	return UpdateLock(dir, func(cur *Lock) error {
		cur.Plugins = l.Plugins
		return nil
	})
}

// UpdateLock changes <dir>/.toolhost/plugins.lock.json read-modify-write: under the
// file's lock (a hidden sibling, see internal/filestore), which excludes every
// other toolhost process changing it, change is given the latest Lock and changes
// it in place; the result is written atomically and durably. When change fails,
// nothing is written and its error is returned as is.
func UpdateLock(dir string, change func(*Lock) error) error {
	file := filepath.Join(dir, filepath.FromSlash(LockPath))
	err := filestore.Update(file, 0o644, func(old []byte) ([]byte, error) {
		l, err := decodeLock(file, old)
		if err != nil {
			return nil, passed{err}
		}
		if err := change(l); err != nil {
			return nil, passed{err}
		}
		data, err := json.MarshalIndent(lockFile{Version: lockFormat, Plugins: l.Plugins}, "", "  ")
		if err != nil {
			return nil, err
		}
		if old != nil && bytes.Equal(old, append(data, '\n')) {
			return nil, filestore.ErrUnchanged
		}
		return append(data, '\n'), nil
	})
	var p passed
	if errors.As(err, &p) {
		return p.err
	}
	if err != nil {
		return fmt.Errorf("location: write lock file: %w", err)
	}
	return nil
}

// passed carries an error of UpdateLock's caller through filestore.Update.
type passed struct{ err error }

func (p passed) Error() string { return p.err.Error() }
