//go:build unix

package permission_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/toolhost/toolhost/internal/disktest"
	"github.com/toolhost/toolhost/internal/filestore"
	"github.com/toolhost/toolhost/permission"
)

// grantAll is a well-formed approvals file that allows everything.
const grantAll = `{"version": 1, "approvals": [{"action": "*", "resource": "*"}]}`

// TestPlantedStateFileGrantsNothing: an approvals file that toolhost would not
// have written — a link to a file elsewhere, one in a directory others may write
// (they could have planted it), a huge one — is refused with a *StateError naming
// it and what to do, however well-formed what it holds, and nothing is granted.
func TestPlantedStateFileGrantsNothing(t *testing.T) {
	tests := []struct {
		name  string
		plant func(t *testing.T, dir, state string)
		says  string
	}{
		{"LinkToAFileElsewhere", func(t *testing.T, dir, state string) {
			outside := filepath.Join(t.TempDir(), "approvals.json")
			writeFile(t, outside, grantAll)
			if err := os.Symlink(outside, state); err != nil {
				t.Fatal(err)
			}
		}, "symbolic link"},
		{"DirectoryOthersMayWrite", func(t *testing.T, dir, state string) {
			writeFile(t, state, grantAll)
			if err := os.Chmod(dir, 0o777); err != nil {
				t.Fatal(err)
			}
		}, "writable by others"},
		{"Huge", func(t *testing.T, dir, state string) {
			writeFile(t, state, grantAll)
			f, err := os.OpenFile(state, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			// 32 MiB: the document, then a hole.
			if _, err := f.WriteAt([]byte(" "), 32<<20); err != nil {
				t.Fatal(err)
			}
		}, "larger than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "permissions")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			state := filepath.Join(dir, "approvals.json")
			tt.plant(t, dir, state)
			s, err := permission.New(permission.Options{StateFile: state})
			if s != nil {
				defer s.Close()
				t.Fatalf("New over a planted file: a Service that evaluates read on x as %q", s.Evaluate("read", []string{"x"}))
			}
			var se *permission.StateError
			if !errors.As(err, &se) || !errors.Is(err, filestore.ErrRefused) || !strings.Contains(err.Error(), tt.says) || !strings.Contains(err.Error(), dir) {
				t.Fatalf("New = %v; want a *StateError saying %q of %s", err, tt.says, dir)
			}
			t.Log(err)
		})
	}
}

// TestAlwaysOnAFullDisk: an "always" answer that cannot be saved because the disk
// is full is an error that says so (the call is not reported allowed), grants
// nothing, and leaves the saved approvals whole; once space is back the next
// "always" is saved and holds in the next host.
func TestAlwaysOnAFullDisk(t *testing.T) {
	disktest.Run(t, 64<<10, func(t *testing.T, d *disktest.Disk) {
		state := filepath.Join(d.Dir, "permissions", "approvals.json")
		asker := &answerAsker{ans: permission.Answer{Reply: permission.Always}}
		s := newService(t, permission.Options{Asker: asker, StateFile: state})
		always := func(action string) error {
			r := req("s1", action, "a")
			r.Save = []string{strings.Repeat("*", 8<<10)} // more than the file's last page takes
			return s.Assert(t.Context(), r)
		}
		if err := always("first"); err != nil {
			t.Fatal(err)
		}
		before, err := os.ReadFile(state)
		if err != nil {
			t.Fatal(err)
		}
		d.Fill(t)
		err = always("second")
		var se *permission.StateError
		if !errors.As(err, &se) || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), state) || !strings.Contains(err.Error(), "free space") {
			t.Fatalf("Assert on a full disk = %v; want a *StateError naming the file, ENOSPC and what to do", err)
		}
		t.Log(err)
		if got := s.Evaluate("second", []string{"a"}); got != permission.Ask {
			t.Errorf("after the failed save Evaluate = %q, want ask", got)
		}
		if after, err := os.ReadFile(state); err != nil || string(after) != string(before) {
			t.Errorf("the approvals file changed: %v", err)
		}
		d.Free(t)
		if err := always("third"); err != nil {
			t.Fatalf("once space is back: %v", err)
		}
		next := newService(t, permission.Options{StateFile: state})
		for action, want := range map[string]permission.Effect{"first": permission.Allow, "second": permission.Ask, "third": permission.Allow} {
			if got := next.Evaluate(action, []string{"a"}); got != want {
				t.Errorf("the next host evaluates %s as %q, want %q", action, got, want)
			}
		}
	})
}
