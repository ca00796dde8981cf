//go:build linux

package fsys_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/toolhost/toolhost/fsys"
)

// swapper exchanges two names in a tight loop until stopped: with renameat2's
// RENAME_EXCHANGE where the file system has it (both names always exist), else by
// renaming fresh copies over a.
type swapper struct {
	stop  chan struct{}
	done  chan struct{}
	swaps atomic.Int64
}

// startSwapper swaps a (the name the reader uses) between what a and b hold now.
func startSwapper(t *testing.T, dir, a, b string) *swapper {
	t.Helper()
	s := &swapper{stop: make(chan struct{}), done: make(chan struct{})}
	pa, pb := filepath.Join(dir, a), filepath.Join(dir, b)
	exchange := unix.Renameat2(unix.AT_FDCWD, pa, unix.AT_FDCWD, pb, unix.RENAME_EXCHANGE) == nil
	if !exchange {
		t.Logf("no RENAME_EXCHANGE here; swapping by rename")
	}
	go func() {
		defer close(s.done)
		for {
			select {
			case <-s.stop:
				return
			default:
			}
			if exchange {
				if err := unix.Renameat2(unix.AT_FDCWD, pa, unix.AT_FDCWD, pb, unix.RENAME_EXCHANGE); err != nil {
					panic(err)
				}
			} else {
				swapByRename(pa, pb)
			}
			s.swaps.Add(1)
		}
	}()
	t.Cleanup(s.Stop)
	return s
}

// swapByRename exchanges pa and pb through a third name; pa is missing for an
// instant, which readers see as fs.ErrNotExist.
func swapByRename(pa, pb string) {
	tmp := pa + ".swap"
	for _, r := range [][2]string{{pa, tmp}, {pb, pa}, {tmp, pb}} {
		if err := os.Rename(r[0], r[1]); err != nil {
			panic(err)
		}
	}
}

// Stop ends the swapping and waits for it; it is idempotent.
func (s *swapper) Stop() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}

// raceTree makes root/ and outside/ side by side. Inside: file "x" holding
// "inside" and "x_out", a symlink to ../outside/secret.txt; directory "d" holding
// secret.txt ("inside") and "d_out", a symlink to ../outside.
func raceTree(t *testing.T) (f *fsys.FS, root string) {
	t.Helper()
	base := t.TempDir()
	root, outside := filepath.Join(base, "root"), filepath.Join(base, "outside")
	mkdir(t, outside)
	mkdir(t, filepath.Join(root, "d"))
	write(t, filepath.Join(outside, "secret.txt"), "secret\n")
	write(t, filepath.Join(outside, "only_outside.txt"), "secret\n")
	write(t, filepath.Join(root, "x"), "inside\n")
	write(t, filepath.Join(root, "d", "secret.txt"), "inside\n")
	for link, target := range map[string]string{"x_out": "../outside/secret.txt", "d_out": "../outside"} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	f, err := fsys.New(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, root
}

// raceReads is how many reads TestReadRaceNeverLeavesRoot makes per path.
const raceReads = 100_000

// TestReadRaceNeverLeavesRoot reads a file, and a file below a directory, while
// another goroutine swaps each for a symlink leading out of the root, and checks
// that no read ever returns the outside file: a read returns the inside content or
// a refusal. It also checks that the swap did race the reads (both outcomes seen).
func TestReadRaceNeverLeavesRoot(t *testing.T) {
	for _, tt := range []struct{ name, path, a, b string }{
		{"File", "x", "x", "x_out"},
		{"Directory", "d/secret.txt", "d", "d_out"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, root := raceTree(t)
			sw := startSwapper(t, root, tt.a, tt.b)
			var inside, refused, outside int
			for range raceReads {
				data, err := f.Read(t.Context(), tt.path, 0, 0)
				switch {
				case err == nil && string(data) == "inside\n":
					inside++
				case err == nil:
					outside++
				case refusal(err):
					refused++
				default:
					t.Fatalf("Read(%q): %v", tt.path, err)
				}
			}
			sw.Stop()
			t.Logf("%d reads during %d swaps: %d inside, %d refused, %d outside", raceReads, sw.swaps.Load(), inside, refused, outside)
			if outside > 0 {
				t.Fatalf("%d of %d reads returned the file outside the root", outside, raceReads)
			}
			if inside == 0 || refused == 0 {
				t.Fatalf("the swap did not race the reads (%d inside, %d refused)", inside, refused)
			}
		})
	}
}

// TestWalkRaceNeverLeavesRoot lists, globs and greps while a directory is swapped
// for a symlink leading out of the root, and checks that no result ever comes from
// outside.
func TestWalkRaceNeverLeavesRoot(t *testing.T) {
	f, root := raceTree(t)
	write(t, filepath.Join(root, "d", "only_inside.txt"), "inside\n")
	sw := startSwapper(t, root, "d", "d_out")
	const walks = 3000
	var wg sync.WaitGroup
	check := func(what string, ok func() (bool, error)) {
		defer wg.Done()
		for range walks {
			leaked, err := ok()
			if err != nil && !refusal(err) {
				t.Errorf("%s: %v", what, err)
				return
			}
			if leaked {
				t.Errorf("%s returned something from outside the root", what)
				return
			}
		}
	}
	wg.Add(3)
	go check("Grep", func() (bool, error) {
		ms, err := f.Grep(t.Context(), "secret", fsys.GrepOptions{})
		return len(ms) > 0, err
	})
	go check("List(d)", func() (bool, error) {
		es, err := f.List(t.Context(), "d")
		if err == nil && len(es) > 0 && !hasEntry(es, "only_inside.txt", "file") {
			return true, nil
		}
		return false, err
	})
	go check("Glob", func() (bool, error) {
		ps, err := f.Glob(t.Context(), "**/only_outside.txt", 0)
		return len(ps) > 0, err
	})
	wg.Wait()
	sw.Stop()
	t.Logf("%d walks of each kind during %d swaps", walks, sw.swaps.Load())
}

// refusal reports whether err is how a raced path is refused: it led out of the
// root, it was missing for an instant, or it changed from a symlink to something
// else while it was being opened (reported as a loop, or as not a directory).
func refusal(err error) bool {
	for _, want := range []error{fsys.ErrOutsideRoot, fs.ErrNotExist, fsys.ErrInvalidPath, fsys.ErrNotDir} {
		if errors.Is(err, want) {
			return true
		}
	}
	return false
}
