package server_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/toolhost/toolhost/client"
	"github.com/toolhost/toolhost/location"
)

// bareWorkspace makes a Location without sources, quick to activate.
func bareWorkspace(t *testing.T) string {
	t.Helper()
	dir, err := location.Canonicalize(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, ".toolhost"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, location.ConfigPath), []byte(`{"permission": `+rules+`}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestActivateWhileAnotherClientDeactivates has clients activate and deactivate
// one Location over and over: an activation that meets a deactivation waits for it
// and activates, never failing with "location already open".
func TestActivateWhileAnotherClientDeactivates(t *testing.T) {
	f := start(t, nil)
	dir := bareWorkspace(t)
	const clients, rounds = 4, 40
	var wg sync.WaitGroup
	errs := make(chan error, clients*rounds)
	for i := range clients {
		c := f.dial(t)
		wg.Go(func() {
			for r := range rounds {
				loc, _, err := c.ActivateLocation(t.Context(), dir)
				if err != nil {
					errs <- fmt.Errorf("client %d round %d: activate: %w", i, r, err)
					continue
				}
				if err := c.DeactivateLocation(t.Context(), loc.ID); err != nil && !errors.Is(err, client.ErrNotFound) {
					errs <- fmt.Errorf("client %d round %d: deactivate: %w", i, r, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	n := 0
	for err := range errs {
		if n++; n <= 5 {
			t.Error(err)
		}
	}
	if n > 5 {
		t.Errorf("and %d more errors", n-5)
	}
}
