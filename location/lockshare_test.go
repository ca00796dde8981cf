package location_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"

	"github.com/toolhost/toolhost/location"
)

// helperLock is a host process upgrading one module plugin of the Location
// LOCATION_DIR (LOCATION_UPGRADE names it) with the go environment it was given.
func helperLock() {
	dir := os.Getenv("LOCATION_DIR")
	cfg, err := location.LoadConfig(dir)
	if err == nil {
		_, _, err = location.LockModules(context.Background(), dir, cfg, location.LockOptions{Env: os.Environ(), Upgrade: []string{os.Getenv("LOCATION_UPGRADE")}})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// TestHostsUpgradingPluginsConcurrentlyKeepBothLocks has two host processes upgrade
// one module plugin each in one Location at the same time: the lock file ends with
// both upgrades.
func TestHostsUpgradingPluginsConcurrentlyKeepBothLocks(t *testing.T) {
	p, goEnv := offlineProxy(t, "v1.0.0")
	dir := workspace(t, obj{"plugins": []obj{
		{"name": "a", "module": greetPackage, "version": "v1", "allow": true},
		{"name": "b", "module": greetPackage, "version": "v1", "allow": true},
	}})
	cfg, err := location.LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := location.LockModules(t.Context(), dir, cfg, location.LockOptions{Env: goEnv}); err != nil {
		t.Fatal(err)
	}
	addGreet(t, p, goEnv, "v1.1.0")

	var wg sync.WaitGroup
	for _, name := range []string{"a", "b"} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(goEnv, "LOCATION_HELPER=lock", "LOCATION_DIR="+dir, "LOCATION_UPGRADE="+name)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			if err := cmd.Wait(); err != nil {
				t.Errorf("host upgrading %s: %v", name, err)
			}
		})
	}
	wg.Wait()
	lock, err := location.ReadLock(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		if v := lock.Plugins[name].Version; v != "v1.1.0" {
			t.Errorf("plugin %s locked at %q, want the upgrade to v1.1.0", name, v)
		}
	}
}
