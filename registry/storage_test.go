package registry

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolhost/toolhost/internal/disktest"
	"github.com/toolhost/toolhost/internal/filestore"
)

func TestDefaultStorageDir(t *testing.T) {
	tests := []struct {
		name                      string
		override, xdg, home, want string
	}{
		{name: "OverrideFirst", override: "/custom/out", xdg: "/xdg", home: "/home/u", want: "/custom/out"},
		{name: "XDGDataHome", xdg: "/xdg", home: "/home/u", want: "/xdg/toolhost/tool-output"},
		{name: "RelativeXDGIgnored", xdg: "rel/xdg", home: "/home/u", want: "/home/u/.local/share/toolhost/tool-output"},
		{name: "HomeFallback", home: "/home/u", want: "/home/u/.local/share/toolhost/tool-output"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("TOOLHOST_OUTPUT_DIR", tt.override)
			t.Setenv("XDG_DATA_HOME", tt.xdg)
			t.Setenv("HOME", tt.home)
			got, err := DefaultStorageDir()
			if err != nil || got != tt.want {
				t.Errorf("DefaultStorageDir = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	t.Run("NoHomeFails", func(t *testing.T) {
		t.Setenv("TOOLHOST_OUTPUT_DIR", "")
		t.Setenv("XDG_DATA_HOME", "")
		t.Setenv("HOME", "")
		if got, err := DefaultStorageDir(); err == nil {
			t.Errorf("DefaultStorageDir = %q, want an error", got)
		}
	})
}

func TestOpenStorage(t *testing.T) {
	t.Run("CreatesDirectoryAndParents0700", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "a", "b")
		st, err := OpenStorage(dir, StorageOptions{})
		if err != nil {
			t.Fatalf("OpenStorage: %v", err)
		}
		info, err := os.Stat(dir)
		if err != nil || !info.IsDir() || info.Mode().Perm() != 0o700 {
			t.Fatalf("directory: %v, %v; want a 0700 directory", info, err)
		}
		if st.Dir() != dir {
			t.Errorf("Dir = %q, want %q", st.Dir(), dir)
		}
		if entries := outputFiles(t, dir); len(entries) != 0 {
			t.Errorf("directory holds %d entries after opening, want none (the probe removed)", len(entries))
		}
	})
	t.Run("RelativeDirectoryMadeAbsolute", func(t *testing.T) {
		base := t.TempDir()
		t.Chdir(base)
		st, err := OpenStorage("out", StorageOptions{})
		if err != nil {
			t.Fatalf("OpenStorage: %v", err)
		}
		if want := filepath.Join(base, "out"); st.Dir() != want {
			t.Errorf("Dir = %q, want %q", st.Dir(), want)
		}
	})

	tooLong := "/" + strings.Repeat("x", maxStorageDirLen)
	tests := []struct {
		name    string
		dir     func(t *testing.T) string
		opts    StorageOptions
		wantErr error // checked with errors.Is when not nil
	}{
		{name: "EmptyPath", dir: func(*testing.T) string { return "" }},
		{name: "PathTooLong", dir: func(*testing.T) string { return tooLong }},
		{name: "PathWithNewline", dir: func(t *testing.T) string { return filepath.Join(t.TempDir(), "a\nb") }},
		{name: "PathInvalidUTF8", dir: func(t *testing.T) string { return filepath.Join(t.TempDir(), "a\xff") }},
		{name: "NegativeRetention", dir: func(t *testing.T) string { return t.TempDir() }, opts: StorageOptions{Retention: -time.Hour}},
		{
			name: "PathIsAFile",
			dir: func(t *testing.T) string {
				p := filepath.Join(t.TempDir(), "file")
				if err := os.WriteFile(p, nil, 0o600); err != nil {
					t.Fatal(err)
				}
				return p
			},
			wantErr: syscall.ENOTDIR,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := OpenStorage(tt.dir(t), tt.opts)
			var sErr *StorageError
			if st != nil || !errors.As(err, &sErr) || !strings.HasPrefix(err.Error(), "registry: ") {
				t.Fatalf("OpenStorage = %v, %v; want a *StorageError", st, err)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("OpenStorage error = %v, want %v", err, tt.wantErr)
			}
		})
	}
}

// failingSource writes some bytes, then fails like a full disk.
type failingSource struct{}

func (failingSource) WriteTo(w io.Writer) (int64, error) {
	n, err := io.WriteString(w, "partial output")
	if err != nil {
		return int64(n), err
	}
	return int64(n), &fs.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC}
}

func TestStorageRetainFailure(t *testing.T) {
	tests := []struct {
		name    string
		breakIt func(t *testing.T, dir string)
		src     io.WriterTo
		wantErr error
	}{
		{
			name:    "DiskFullRemovesPartialFile",
			breakIt: func(*testing.T, string) {},
			src:     failingSource{},
			wantErr: syscall.ENOSPC,
		},
		{
			name: "DirectoryRemoved",
			breakIt: func(t *testing.T, dir string) {
				if err := os.RemoveAll(dir); err != nil {
					t.Fatal(err)
				}
			},
			src:     strings.NewReader("output"),
			wantErr: fs.ErrNotExist,
		},
		{
			name: "DirectoryReplacedByFile",
			breakIt: func(t *testing.T, dir string) {
				if err := os.RemoveAll(dir); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(dir, nil, 0o600); err != nil {
					t.Fatal(err)
				}
			},
			src:     strings.NewReader("output"),
			wantErr: syscall.ENOTDIR,
		},
		{
			name: "DirectoryNotWritable",
			breakIt: func(t *testing.T, dir string) {
				if os.Geteuid() == 0 {
					t.Skip("root bypasses directory permissions")
				}
				if err := os.Chmod(dir, 0o500); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = os.Chmod(dir, 0o700) })
			},
			src:     strings.NewReader("output"),
			wantErr: fs.ErrPermission,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := openBoundStorage(t)
			tt.breakIt(t, st.Dir())
			path, err := st.retain(tt.src)
			var sErr *StorageError
			if path != "" || !errors.As(err, &sErr) || !errors.Is(err, tt.wantErr) {
				t.Fatalf("retain = %q, %v; want a *StorageError wrapping %v", path, err, tt.wantErr)
			}
			if entries := outputFiles(t, st.Dir()); len(entries) != 0 {
				t.Errorf("storage holds %d files after a failed retain, want none", len(entries))
			}
		})
	}
}

func TestStorageSweep(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name      string
		retention time.Duration
		age       time.Duration // of every file made below
		wantGone  bool          // whether the managed file is removed
	}{
		{name: "DefaultRetentionKeepsFresh", age: 6 * 24 * time.Hour},
		{name: "DefaultRetentionRemovesOld", age: 8 * 24 * time.Hour, wantGone: true},
		{name: "CustomRetentionRemovesOld", retention: time.Hour, age: 2 * time.Hour, wantGone: true},
		{name: "CustomRetentionKeepsFresh", retention: time.Hour, age: 30 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := OpenStorage(t.TempDir(), StorageOptions{Retention: tt.retention, Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			managed, err := st.retain(strings.NewReader("output"))
			if err != nil {
				t.Fatal(err)
			}
			foreign := []string{
				filepath.Join(st.Dir(), "notes.txt"),
				filepath.Join(st.Dir(), managedPrefix+"not-hex"),
				filepath.Join(st.Dir(), managedPrefix+strings.Repeat("A", managedSuffixLen)),
			}
			for _, p := range foreign {
				if err := os.WriteFile(p, nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			lookalikeDir := filepath.Join(st.Dir(), managedPrefix+strings.Repeat("0", managedSuffixLen))
			if err := os.Mkdir(lookalikeDir, 0o700); err != nil {
				t.Fatal(err)
			}
			for _, p := range append(foreign, managed, lookalikeDir) {
				if err := os.Chtimes(p, now.Add(-tt.age), now.Add(-tt.age)); err != nil {
					t.Fatal(err)
				}
			}

			if err := st.Sweep(); err != nil {
				t.Fatalf("Sweep: %v", err)
			}
			if _, err := os.Stat(managed); errors.Is(err, fs.ErrNotExist) != tt.wantGone {
				t.Errorf("managed file: stat error %v, want removed = %v", err, tt.wantGone)
			}
			for _, p := range append(foreign, lookalikeDir) {
				if _, err := os.Stat(p); err != nil {
					t.Errorf("Sweep touched %s: %v", filepath.Base(p), err)
				}
			}
		})
	}
}

func TestStorageSweepMissingDirectoryFails(t *testing.T) {
	st := openBoundStorage(t)
	if err := os.RemoveAll(st.Dir()); err != nil {
		t.Fatal(err)
	}
	var sErr *StorageError
	if err := st.Sweep(); !errors.As(err, &sErr) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Sweep = %v, want a *StorageError for the missing directory", err)
	}
}

// outputFiles lists the directory's entries but for the lock file of its accounting.
func outputFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, _ := os.ReadDir(dir) // none when it is gone
	var names []string
	for _, e := range entries {
		if e.Name() != lockFileName {
			names = append(names, e.Name())
		}
	}
	return names
}

// TestRetainOnAFullDisk: a retention that fills the disk fails with a
// *StorageError that says so and what to do, leaves no partial file and no
// reservation against the quota, and the next retention once space is back
// succeeds.
func TestRetainOnAFullDisk(t *testing.T) {
	disktest.Run(t, 256<<10, func(t *testing.T, d *disktest.Disk) {
		st, err := OpenStorage(filepath.Join(d.Dir, "out"), StorageOptions{})
		if err != nil {
			t.Fatal(err)
		}
		q := st.forLocation("loc", 1<<30)
		d.Fill(t)
		out := strings.Repeat("o", 128<<10)
		path, err := q.retain(strings.NewReader(out))
		var sErr *StorageError
		if path != "" || !errors.As(err, &sErr) || !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("retain on a full disk = %q, %v; want a *StorageError wrapping ENOSPC", path, err)
		}
		t.Log(err)
		for _, w := range []string{st.Dir(), "free space"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("the error does not say %q", w)
			}
		}
		if left := outputFiles(t, st.Dir()); len(left) != 0 {
			t.Errorf("after a failed retain the directory holds %v", left)
		}
		if used, err := st.Usage("loc"); used != 0 || err != nil {
			t.Errorf("Usage = %d, %v after a failed retain; want 0", used, err)
		}
		d.Free(t)
		path, err = q.retain(strings.NewReader(out))
		if err != nil {
			t.Fatalf("retain once space is back: %v", err)
		}
		if data, err := os.ReadFile(path); err != nil || string(data) != out {
			t.Errorf("the managed file holds %d bytes, %v; want the %d retained", len(data), err, len(out))
		}
	})
}

// TestOpenStorageRefusesASharedDirectory: a managed directory others may write
// (where they could replace an output the model is told about) is refused with
// an error naming it and what to do.
func TestOpenStorageRefusesASharedDirectory(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("modes are Unix's")
	}
	dir := filepath.Join(t.TempDir(), "out")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	st, err := OpenStorage(dir, StorageOptions{})
	var sErr *StorageError
	if st != nil || !errors.As(err, &sErr) || !errors.Is(err, filestore.ErrRefused) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "chmod go-w") {
		t.Fatalf("OpenStorage = %v, %v; want a *StorageError refusing %s", st, err, dir)
	}
	t.Log(err)
}
