//go:build unix

package filestore_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/toolhost/toolhost/internal/filestore"
)

// TestPolicyRefusesHostileFiles plants, where a store keeps its file, what the
// store never writes: each is refused with an error naming it and what to do, by
// ReadFile and by Update, which writes nothing, and what the planted link points
// to is left as it was.
func TestPolicyRefusesHostileFiles(t *testing.T) {
	private := filestore.Policy{Private: true, Secret: true, MaxBytes: 1 << 10}
	tests := []struct {
		name   string
		policy filestore.Policy
		plant  func(t *testing.T, dir, path string)
		says   string
	}{
		{"SymbolicLinkToOutside", filestore.Policy{}, func(t *testing.T, dir, path string) {
			outside := filepath.Join(t.TempDir(), "elsewhere.json")
			write(t, outside, `{"granted": "everything"}`, 0o600)
			if err := os.Symlink(outside, path); err != nil {
				t.Fatal(err)
			}
		}, "symbolic link"},
		{"NamedPipe", filestore.Policy{}, func(t *testing.T, dir, path string) {
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "named pipe"},
		{"Directory", filestore.Policy{}, func(t *testing.T, dir, path string) {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}, "a directory"},
		{"Huge", private, func(t *testing.T, dir, path string) {
			write(t, path, "", 0o600)
			if err := os.Truncate(path, 1<<40); err != nil { // sparse: a terabyte of nothing
				t.Fatal(err)
			}
		}, "larger than the 1024 bytes"},
		{"SecretReadableByOthers", private, func(t *testing.T, dir, path string) {
			write(t, path, `{"token": "x"}`, 0o644)
		}, "chmod 600"},
		{"WritableByOthers", private, func(t *testing.T, dir, path string) {
			write(t, path, `{}`, 0o622)
		}, "chmod go-w"},
		{"DirectoryWritableByOthers", private, func(t *testing.T, dir, path string) {
			write(t, path, `{}`, 0o600)
			if err := os.Chmod(dir, 0o777); err != nil {
				t.Fatal(err)
			}
		}, "plant or replace"},
		{"OwnedByAnother", private, func(t *testing.T, dir, path string) {
			if os.Geteuid() != 0 {
				t.Skip("only root can give a file to another user")
			}
			write(t, path, `{}`, 0o600)
			if err := os.Chown(path, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}, "owned by uid 65534"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "store")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "state.json")
			tt.plant(t, dir, path)
			before := snapshot(t, path)

			data, err := tt.policy.ReadFile(path)
			var fe *filestore.FileError
			if !errors.As(err, &fe) || !errors.Is(err, filestore.ErrRefused) || !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("ReadFile = %q, %v; want a *FileError saying %q", data, err, tt.says)
			}
			if !strings.Contains(err.Error(), fe.Path) || !strings.HasPrefix(fe.Path, dir) {
				t.Errorf("the error names %q, want the file or its directory", fe.Path)
			}
			t.Log(err)
			called := false
			err = tt.policy.Update(path, 0o600, func([]byte) ([]byte, error) { called = true; return []byte("{}"), nil })
			if !errors.Is(err, filestore.ErrRefused) || called {
				t.Errorf("Update = %v (its function called: %v); want the refusal, nothing written", err, called)
			}
			if after := snapshot(t, path); after != before {
				t.Errorf("the planted file changed: %s, was %s", after, before)
			}
		})
	}
}

// TestPolicyReadsWhatItWrites: a file a Policy's Update wrote reads back, and a
// missing one is nil without an error.
func TestPolicyReadsWhatItWrites(t *testing.T) {
	p := filestore.Policy{Private: true, Secret: true}
	path := filepath.Join(t.TempDir(), "new", "state.json")
	if data, err := p.ReadFile(path); data != nil || err != nil {
		t.Fatalf("ReadFile of a missing file = %q, %v", data, err)
	}
	if err := p.Update(path, 0o600, func([]byte) ([]byte, error) { return []byte("{}"), nil }); err != nil {
		t.Fatal(err)
	}
	if data, err := p.ReadFile(path); string(data) != "{}" || err != nil {
		t.Fatalf("ReadFile = %q, %v", data, err)
	}
}

func write(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

// snapshot describes the file at path, and what a link there points to.
func snapshot(t *testing.T, path string) string {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	s := fmt.Sprint(fi.Mode(), " ", fi.Size(), " ", fi.ModTime())
	if target, err := os.Readlink(path); err == nil {
		data, _ := os.ReadFile(target)
		s += " -> " + target + " " + string(data)
	}
	return s
}

// TestLockRefusesALinkAsItsLockFile: a link planted as the lock file (a
// repository can hold one beside its plugins.lock.json) is refused, and the
// file it points to is not created.
func TestLockRefusesALinkAsItsLockFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "plugins.lock.json")
	elsewhere := filepath.Join(t.TempDir(), "autostart.desktop")
	if err := os.Symlink(elsewhere, filestore.LockPath(path)); err != nil {
		t.Fatal(err)
	}
	err := filestore.Update(path, 0o644, func([]byte) ([]byte, error) { return []byte("{}"), nil })
	if !errors.Is(err, filestore.ErrRefused) || !strings.Contains(err.Error(), filestore.LockPath(path)) {
		t.Fatalf("Update = %v; want the lock file refused", err)
	}
	if _, err := os.Lstat(elsewhere); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the file the link points to was made: %v", err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the file was written: %v", err)
	}
}
