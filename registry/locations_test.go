package registry_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/toolhost/toolhost/internal/hosttest"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sdk"
)

// TestOpenLocationsConcurrently opens and removes many Locations at once, each
// registering and preparing in between: under -race, OpenLocation must not read
// the placements while another opening writes them.
func TestOpenLocationsConcurrently(t *testing.T) {
	r := hosttest.Registry(t, registry.Options{})
	const locations, rounds = 8, 50
	var wg sync.WaitGroup
	errs := make(chan error, locations)
	for i := range locations {
		id := fmt.Sprintf("/loc/%d", i)
		wg.Go(func() {
			for range rounds {
				release, err := r.OpenLocation(id, registry.Limits{})
				if err != nil {
					errs <- err
					return
				}
				unregister, err := r.Register(registry.Batch{Location: id, Source: registry.Source{Kind: "plugin", Name: "p"},
					Tools: map[string]sdk.Tool{"answer": constTool(id)}})
				if err != nil {
					release()
					errs <- err
					return
				}
				q, err := r.Prepare(id)
				if err == nil && len(q.Definitions()) != 1 {
					err = fmt.Errorf("%s: %d definitions, want 1", id, len(q.Definitions()))
				}
				unregister()
				release()
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
