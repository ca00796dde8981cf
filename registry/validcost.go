package registry

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// A schema within the size limits can still be costly to validate against: "$ref"
// lets a few subschemas stand for exponentially many ("anyOf" of two references to
// a definition that does the same, thirty deep), and "pattern" costs with the size
// of the value as well as of the schema. So every schema's validation cost is
// measured when it is compiled:
const (
	// MaxUnfoldedSubschemas bounds the subschemas a schema stands for with every
	// "$ref" replaced by what it references (a recursive reference counted once):
	// as many as one schema may have written out (MaxSchemaNodes). A schema past
	// it is refused at registration.
	MaxUnfoldedSubschemas = MaxSchemaNodes
	// MaxHeavyValueBytes bounds a value validated against a heavy schema, one
	// whose patterns are longer than maxCheapPatternBytes in all: matching costs
	// the pattern's length times the value's. A larger value is refused without
	// validating it. ("uniqueItems" is not heavy: the validator hashes.)
	MaxHeavyValueBytes = 256 << 10
	// MaxValidationsApart bounds the validations running apart from their
	// settlements (see validationCost.apart) against the schemas of one source in
	// one Location, all its generations together. A validation whose settlement
	// was cancelled counts until it ends: it still uses a processor. A call past
	// the limit is refused with a *ValidationsBusyError before validating.
	MaxValidationsApart = 4

	maxCheapPatternBytes = 4 << 10
)

// validationCost is what measureValidation found of one schema.
type validationCost struct {
	// heavy says why values validated against the schema are bounded by
	// MaxHeavyValueBytes; "" when they are not.
	heavy string
	// apart: validation runs apart from the settlement, which stops waiting for
	// it when its context ends (heavy schemas, and recursive ones, whose cost
	// grows with the value's depth, and ones whose references it cannot follow).
	apart bool
	// unfolded is the number of subschemas with every "$ref" unfolded.
	unfolded int
}

// measureValidation measures doc (a decoded schema) for validationCost, or returns
// an error that is ErrSchemaTooComplex when it unfolds past MaxUnfoldedSubschemas.
func measureValidation(what string, doc any) (validationCost, error) {
	w := &costWalk{root: doc, memo: map[string]int{}, active: map[string]bool{}}
	unfolded := w.size(doc)
	if unfolded > MaxUnfoldedSubschemas {
		return validationCost{}, tooComplex("%s: its subschemas unfold through \"$ref\" to more than %d, the limit (validating against it would cost as much as against that many written out)", what, MaxUnfoldedSubschemas)
	}
	c := validationCost{unfolded: unfolded}
	if w.patterns > maxCheapPatternBytes {
		c.heavy = fmt.Sprintf("its patterns are %d bytes", w.patterns)
	}
	c.apart = c.heavy != "" || w.recursive
	return c, nil
}

// costWalk counts the subschemas (objects and booleans) of a schema document with
// every local "$ref" replaced by its target (each target measured once),
// saturating past MaxUnfoldedSubschemas, and notes patterns and recursion.
type costWalk struct {
	root      any
	memo      map[string]int  // ref → its target's unfolded size
	active    map[string]bool // refs being measured: a reference back is recursion
	patterns  int
	recursive bool
}

func (w *costWalk) size(node any) int {
	n := 0 // the values that can be schemas count, as in measureSchema
	add := func(k int) { n = min(n+k, MaxUnfoldedSubschemas+1) }
	switch v := node.(type) {
	case bool:
		n = 1
	case map[string]any:
		n = 1
		for key, child := range v {
			switch key {
			case "$ref", "$dynamicRef":
				if ref, ok := child.(string); ok {
					add(w.ref(ref))
				}
				continue
			case "pattern":
				if p, ok := child.(string); ok {
					w.patterns += len(p)
				}
			case "patternProperties":
				if props, ok := child.(map[string]any); ok {
					for p := range props {
						w.patterns += len(p)
					}
				}
			}
			add(w.size(child))
		}
	case []any:
		for _, child := range v {
			add(w.size(child))
		}
	}
	return n
}

// ref is the unfolded size of a reference's target: 1 for one it cannot resolve
// here (an anchor, a dynamic reference; the compiler resolves those) or that
// refers back to itself (recursion, noted).
func (w *costWalk) ref(ref string) int {
	if n, ok := w.memo[ref]; ok {
		return n
	}
	target, ok := pointerTarget(w.root, ref)
	if !ok {
		w.recursive = true // unknown: treated like recursion, validated apart
		return 1
	}
	if w.active[ref] {
		w.recursive = true
		return 1
	}
	w.active[ref] = true
	n := w.size(target)
	delete(w.active, ref)
	w.memo[ref] = n
	return n
}

// pointerTarget resolves a reference "#" or "#/a/b" within root.
func pointerTarget(root any, ref string) (any, bool) {
	if ref == "#" {
		return root, true
	}
	p, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return nil, false
	}
	node := root
	for _, tok := range strings.Split(p, "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch v := node.(type) {
		case map[string]any:
			if node, ok = v[tok]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(v) {
				return nil, false
			}
			node = v[i]
		default:
			return nil, false
		}
	}
	return node, true
}

// validatingApart counts the validations running apart, for the tests.
var validatingApart atomic.Int64

// ValidationsBusyError refuses a call because MaxValidationsApart validations
// against its source's schemas are running already. The call was not validated
// nor run; it may be made again once they end. It is an operational failure, not a
// settlement.
type ValidationsBusyError struct {
	Tool   string
	Source string // "plugin text", "mcp fs"
}

func (e *ValidationsBusyError) Error() string {
	return fmt.Sprintf("registry: call %q refused: %d validations against the costly schemas of %s are running already (cancelled ones count until they end), the most the host runs at once per source; call again once they end",
		e.Tool, MaxValidationsApart, e.Source)
}

// apartKey names the source whose validations a counter of apartCounts counts.
type apartKey struct{ location, kind, name string }

// apartCounts holds one counter of validations running apart per source and
// Location; a counter, once made, is kept for the registry's life (one per source
// name ever registered).
type apartCounts struct {
	mu     sync.Mutex
	counts map[apartKey]*atomic.Int32
}

func (a *apartCounts) of(location string, src Source) *atomic.Int32 {
	k := apartKey{location, src.Kind, src.Name}
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.counts[k]
	if c == nil {
		if a.counts == nil {
			a.counts = map[apartKey]*atomic.Int32{}
		}
		c = new(atomic.Int32)
		a.counts[k] = c
	}
	return c
}

// validateWithin is validate, bounded by what s's validation costs: a value over
// MaxHeavyValueBytes is refused unvalidated for a heavy schema, and validation
// against a schema measured to run apart is left (it finishes by itself) when
// ctx ends, returning ctx's cause. Validations apart are counted in e's source's
// counter; past MaxValidationsApart the call is refused (*ValidationsBusyError).
func (s *compiledSchema) validateWithin(ctx context.Context, e *entry, data []byte) (any, []Problem, error) {
	if s == nil || !s.cost.apart {
		v, problems := s.validate(data)
		return v, problems, nil
	}
	if s.cost.heavy != "" && len(data) > MaxHeavyValueBytes {
		return nil, []Problem{{Message: fmt.Sprintf("%d bytes, over the %d bytes the host validates against this schema (%s)", len(data), MaxHeavyValueBytes, s.cost.heavy)}}, nil
	}
	if e.apart.Add(1) > MaxValidationsApart {
		e.apart.Add(-1)
		return nil, nil, &ValidationsBusyError{Tool: e.name, Source: e.source.String()}
	}
	type result struct {
		v        any
		problems []Problem
	}
	done := make(chan result, 1)
	validatingApart.Add(1)
	go func() {
		defer validatingApart.Add(-1)
		defer e.apart.Add(-1)
		v, problems := s.validate(data)
		done <- result{v, problems}
	}()
	select {
	case r := <-done:
		return r.v, r.problems, nil
	case <-ctx.Done():
		return nil, nil, context.Cause(ctx)
	}
}
