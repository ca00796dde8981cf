package filestore_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/toolhost/toolhost/internal/disktest"
	"github.com/toolhost/toolhost/internal/filestore"
)

const helperEnv = "FILESTORE_TEST_HELPER"

func TestMain(m *testing.M) {
	if path := os.Getenv(helperEnv); path != "" {
		stuckWriter(path)
	}
	os.Exit(m.Run())
}

// stuckWriter takes path's lock, writes half a temporary file as Write does,
// says so, and waits to be killed.
func stuckWriter(path string) {
	l, err := filestore.Lock(path)
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err == nil {
		_, err = tmp.WriteString(`{"half": `)
	}
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Println("mid-write")
	defer l.Unlock() // never: the process is killed first
	select {}
}

// TestWriterKilledMidWrite: a process killed while it holds the lock and writes
// leaves the file whole and the lock free; the next start removes its temporary
// file.
func TestWriterKilledMidWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	if err := filestore.Update(path, 0o600, func([]byte) ([]byte, error) { return []byte(`{"whole": true}`), nil }); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	cmd.Process.Kill()
	cmd.Wait()
	if line != "mid-write\n" {
		t.Fatalf("the writer said %q", line)
	}
	removed, err := filestore.Clean(path) // the lock is free: its holder died
	if err != nil || len(removed) != 1 {
		t.Fatalf("Clean = %v, %v; want the one temporary file removed", removed, err)
	}
	if data, err := os.ReadFile(path); err != nil || string(data) != `{"whole": true}` {
		t.Errorf("the file holds %q, %v; want it whole", data, err)
	}
}

// TestConcurrentUpdatesLoseNothing: updates from many goroutines (each with its own
// lock file descriptor, as processes have) all land.
func TestConcurrentUpdatesLoseNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "list")
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			err := filestore.Update(path, 0o600, func(old []byte) ([]byte, error) {
				return append(old, fmt.Sprintf("%d\n", i)...), nil
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), "\n"); n != 50 {
		t.Errorf("%d of 50 updates kept", n)
	}
	if err := filestore.Update(path, 0o600, func([]byte) ([]byte, error) { return nil, filestore.ErrUnchanged }); err != nil {
		t.Errorf("an unchanged update: %v", err)
	}
}

// TestDiskFullKeepsTheFile: an update that finds the disk full fails with an
// error naming the file and saying what to do, leaves the file as it was and no
// temporary file, and the next update once space is back succeeds.
func TestDiskFullKeepsTheFile(t *testing.T) {
	disktest.Run(t, 64<<10, func(t *testing.T, d *disktest.Disk) {
		path := filepath.Join(d.Dir, "state.json")
		old := `{"whole": true}`
		if err := filestore.Update(path, 0o600, func([]byte) ([]byte, error) { return []byte(old), nil }); err != nil {
			t.Fatal(err)
		}
		d.Fill(t)
		big := strings.Repeat("x", 16<<10)
		err := filestore.Update(path, 0o600, func([]byte) ([]byte, error) { return []byte(big), nil })
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("Update on a full disk = %v, want ENOSPC", err)
		}
		t.Log(err)
		for _, want := range []string{path, "unchanged", "free"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the error does not say %q", want)
			}
		}
		if data, err := os.ReadFile(path); err != nil || string(data) != old {
			t.Errorf("after the failed update the file holds %q, %v; want it as it was", data, err)
		}
		if got := d.Files(t, d.Dir); !slices.Equal(got, []string{".state.json.lock", "state.json"}) {
			t.Errorf("the directory holds %v; want the file and its lock only", got)
		}
		d.Free(t)
		if err := filestore.Update(path, 0o600, func([]byte) ([]byte, error) { return []byte(big), nil }); err != nil {
			t.Fatalf("Update once space is back: %v", err)
		}
		if data, _ := os.ReadFile(path); string(data) != big {
			t.Errorf("the file holds %d bytes, want the %d written", len(data), len(big))
		}
	})
}
