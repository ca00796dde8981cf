package location_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolhost/toolhost/internal/disktest"
	"github.com/toolhost/toolhost/location"
)

// TestBuildOnAFullDisk: a plugin built into a build cache whose disk is full fails
// with an error that names the plugin and shows the go command's complaint, and
// leaves no binary (whole or partial) in the cache and no temporary directory;
// once space is back the same build succeeds.
func TestBuildOnAFullDisk(t *testing.T) {
	disktest.Run(t, 128<<20, func(t *testing.T, d *disktest.Disk) {
		cache := filepath.Join(d.Dir, "build")
		if err := os.MkdirAll(cache, 0o700); err != nil {
			t.Fatal(err)
		}
		d.Fill(t)
		_, _, err := location.BuildPlugin(t.Context(), cache, "echo", echoSource)
		var be *location.BuildError
		if !errors.As(err, &be) || !strings.Contains(err.Error(), `"echo"`) || !strings.Contains(err.Error(), "no space left on device") {
			t.Fatalf("BuildPlugin on a full disk = %v; want a *BuildError naming the plugin and the full disk", err)
		}
		t.Log(err)
		var left []string
		filepath.WalkDir(cache, func(path string, e os.DirEntry, err error) error {
			if err == nil && !e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
				left = append(left, path) // a binary under its final name
			}
			if err == nil && strings.HasSuffix(e.Name(), ".tmp") {
				left = append(left, path)
			}
			return nil
		})
		if len(left) != 0 {
			t.Errorf("the failed build left %v", left)
		}
		d.Free(t)
		bin, built, err := location.BuildPlugin(t.Context(), cache, "echo", echoSource)
		if err != nil || !built {
			t.Fatalf("BuildPlugin once space is back = %v, built %v", err, built)
		}
		if fi, err := os.Stat(bin); err != nil || fi.Size() == 0 {
			t.Errorf("the binary: %v", err)
		}
	})
}

// TestLockOnAFullDisk: a module plugin locked while the workspace's disk is full
// fails, naming the lock file and what to do, and leaves the workspace's
// .toolhost as it was (no lock file, no temporary file); once space is back the
// lock is written.
func TestLockOnAFullDisk(t *testing.T) {
	disktest.Run(t, 1<<20, func(t *testing.T, d *disktest.Disk) {
		_, goEnv := offlineProxy(t, "v1.0.0")
		dir := canonicalDir(t, filepath.Join(d.Dir))
		setConfig(t, dir, obj{"plugins": []obj{{"name": "greet", "module": greetPackage, "version": "v1", "allow": true}}})
		cfg, err := location.LoadConfig(dir)
		if err != nil {
			t.Fatal(err)
		}
		before := d.Files(t, filepath.Join(dir, ".toolhost"))
		d.Fill(t)
		_, _, err = location.LockModules(t.Context(), dir, cfg, location.LockOptions{Env: goEnv})
		lockFile := filepath.Join(dir, location.LockPath)
		if err == nil || !strings.Contains(err.Error(), lockFile) || !strings.Contains(err.Error(), "free space") {
			t.Fatalf("LockModules on a full disk = %v; want an error naming %s and what to do", err, lockFile)
		}
		t.Log(err)
		after := d.Files(t, filepath.Join(dir, ".toolhost"))
		for _, name := range after {
			if name == "plugins.lock.json" || strings.HasSuffix(name, ".tmp") {
				t.Errorf(".toolhost holds %v (before: %v)", after, before)
			}
		}
		d.Free(t)
		if _, _, err := location.LockModules(t.Context(), dir, cfg, location.LockOptions{Env: goEnv}); err != nil {
			t.Fatalf("LockModules once space is back: %v", err)
		}
		if lock, err := location.ReadLock(dir); err != nil || lock.Plugins["greet"].Version != "v1.0.0" {
			t.Errorf("the lock: %+v, %v", lock, err)
		}
	})
}
