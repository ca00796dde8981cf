package registry_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"testing"
	"unicode/utf8"

	"github.com/toolhost/toolhost/internal/hosttest"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sdk"
)

var grammar = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,63}$`)

func FuzzNormalizeName(f *testing.F) {
	for _, s := range []string{"read", "my.tool", "a b", "9x", "", "ünïcödé", "x" + string(make([]byte, 70)), "a\x00b", "a/../b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, authored string) {
		name, err := registry.NormalizeName(authored)
		if err != nil {
			if name != "" {
				t.Fatalf("error with a name: %q", name)
			}
			return
		}
		if !grammar.MatchString(name) {
			t.Fatalf("NormalizeName(%q) = %q, outside the grammar", authored, name)
		}
		if utf8.RuneCountInString(authored) != len(name) {
			t.Fatalf("NormalizeName(%q) = %q: every character maps to exactly one", authored, name)
		}
		if again, err := registry.NormalizeName(name); err != nil || again != name {
			t.Fatalf("not idempotent: %q -> %q (%v)", name, again, err)
		}
	})
}

// FuzzRegisterClose drives random Register/release sequences over a few names and
// two placements, and checks every Request against a simple model: per placement, a
// list of live batches; the effective tool for a name is the latest live batch of the
// Location that has it, else the latest live application batch.
func FuzzRegisterClose(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 128, 129, 4, 130})
	f.Add([]byte{5, 6, 7, 133, 134, 8, 135, 9})
	f.Fuzz(func(t *testing.T, ops []byte) {
		r := hosttest.Registry(t, registry.Options{})
		const loc = "/ws"
		hosttest.OpenLocation(t, r, loc)
		type batch struct {
			id       int
			location string
			names    []string
			release  func()
		}
		var live []*batch
		for i, op := range ops {
			if op&0x80 != 0 && len(live) > 0 { // release a live batch
				k := int(op&0x7f) % len(live)
				live[k].release()
				live = slices.Delete(live, k, k+1)
				continue
			}
			b := &batch{id: i}
			if op&0x40 != 0 {
				b.location = loc
			}
			tools := map[string]sdk.Tool{}
			for bit, name := range []string{"a", "b", "c"} {
				if op&(1<<bit) != 0 || bit == int(op>>3)%3 {
					tools[name] = constTool(fmt.Sprint(i))
					b.names = append(b.names, name)
				}
			}
			release, err := r.Register(registry.Batch{Location: b.location, Tools: tools})
			if err != nil {
				t.Fatal(err)
			}
			b.release = release
			live = append(live, b)

			// Check both placements against the model after each step.
			for _, where := range []string{registry.Application, loc} {
				want := map[string]string{}
				for _, pass := range []string{registry.Application, loc} {
					if pass == loc && where != loc {
						continue
					}
					for _, lb := range live {
						if lb.location == pass {
							for _, n := range lb.names {
								want[n] = fmt.Sprint(lb.id)
							}
						}
					}
				}
				q, err := r.Prepare(where)
				if err != nil {
					t.Fatal(err)
				}
				if len(q.Definitions()) != len(want) {
					t.Fatalf("step %d in %q: %d definitions, model has %v", i, where, len(q.Definitions()), want)
				}
				for n, id := range want {
					s, err := q.Settle(context.Background(), registry.Call{Name: n})
					if err != nil || s.Text() != id {
						t.Fatalf("step %d in %q: %s answered %v (%v), model says batch %s", i, where, n, s, err, id)
					}
				}
			}
		}
	})
}
