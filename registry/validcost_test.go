package registry_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/toolhost/toolhost/internal/hosttest"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sdk"
)

// refChain is a schema of depth definitions, each an "anyOf" of two references to
// the next, the last one an integer: a few hundred bytes that stand for 2^depth
// subschemas, every one of which a string value is checked against.
func refChain(depth int) json.RawMessage {
	var b strings.Builder
	b.WriteString(`{"type":"array","items":{"$ref":"#/$defs/d0"},"$defs":{`)
	for i := range depth {
		fmt.Fprintf(&b, `"d%d":{"anyOf":[{"$ref":"#/$defs/d%d"},{"$ref":"#/$defs/d%d"}]},`, i, i+1, i+1)
	}
	fmt.Fprintf(&b, `"d%d":{"type":"integer"}}}`, depth)
	return json.RawMessage(b.String())
}

// A schema whose references unfold past the limit is refused at registration,
// before it is compiled, naming the limit.
func TestSchemasThatUnfoldTooFarAreRefused(t *testing.T) {
	r := hosttest.Registry(t, registry.Options{})
	hosttest.OpenLocation(t, r, "/ws")
	for _, depth := range []int{30, 9} { // 2^30, and just past the limit
		_, err := r.Register(registry.Batch{Location: "/ws", Source: pluginSrc, Tools: map[string]sdk.Tool{"t": schemaTool(refChain(depth))}})
		if !errors.Is(err, registry.ErrSchemaTooComplex) || !strings.Contains(err.Error(), fmt.Sprintf("unfold through \"$ref\" to more than %d", registry.MaxUnfoldedSubschemas)) {
			t.Fatalf("depth %d: err = %v; want the schema refused naming the unfolding limit", depth, err)
		}
	}
	register(t, r, registry.Batch{Location: "/ws", Source: pluginSrc, Tools: map[string]sdk.Tool{"within": schemaTool(refChain(7))}})
	// A recursive schema is no unfolding without end: it registers.
	register(t, r, registry.Batch{Location: "/ws", Source: pluginSrc, Tools: map[string]sdk.Tool{"tree": schemaTool(json.RawMessage(
		`{"$ref":"#/$defs/node","$defs":{"node":{"type":"object","properties":{"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}}}}}`))}})
}

// stepCanceller is an Observer that cancels a settlement as it begins validating
// its input, a moment later.
type stepCanceller struct{ cancel context.CancelFunc }

func (o stepCanceller) StartSettle(ctx context.Context, _ string, _ registry.Call) (context.Context, registry.Settling) {
	return ctx, o
}
func (stepCanceller) Resolved(registry.Source) {}
func (o stepCanceller) Step(ctx context.Context, st registry.Step) context.Context {
	if st == registry.StepValidateInput {
		time.AfterFunc(20*time.Millisecond, o.cancel)
	}
	return ctx
}
func (stepCanceller) End(*registry.Settlement, error) {}

// heavyPattern is a string schema whose pattern is an alternation of n words:
// matching costs its length times the value's.
func heavyPattern(n int) json.RawMessage {
	var b strings.Builder
	b.WriteString(`{"type":"string","pattern":"^(?:`)
	for i := range n {
		fmt.Fprintf(&b, "w%db|", i)
	}
	b.WriteString(`a)*$"}`)
	return json.RawMessage(b.String())
}

// A value larger than the host validates against a heavy schema is refused
// without validating it; a smaller one is validated apart from the settlement,
// which stops waiting for it when its context ends.
func TestHeavyValidationIsBounded(t *testing.T) {
	schema := heavyPattern(1000) // about 6 KB of pattern: heavy
	r := hosttest.Registry(t, registry.Options{})
	hosttest.OpenLocation(t, r, "/ws")
	register(t, r, registry.Batch{Location: "/ws", Source: pluginSrc, Tools: map[string]sdk.Tool{"heavy": schemaTool(schema)}})
	q, err := r.Prepare("/ws")
	if err != nil {
		t.Fatal(err)
	}
	big := `"` + strings.Repeat("a", registry.MaxHeavyValueBytes) + `"`
	if s := settle(t, q, "heavy", big); s.Outcome != registry.InvalidInput || !strings.Contains(s.Text(), fmt.Sprintf("over the %d bytes the host validates against this schema (its patterns are", registry.MaxHeavyValueBytes)) {
		t.Errorf("a %d-byte input: %s %q; want it refused by its size", len(big), s.Outcome, s.Text())
	}
	if s := settle(t, q, "heavy", `"aaa"`); s.Outcome != registry.Completed {
		t.Errorf("a small valid input: %s %q", s.Outcome, s.Text())
	}

	// Validating this one takes far longer than the moment after which the
	// settlement is cancelled.
	input := `"` + strings.Repeat("a", registry.MaxHeavyValueBytes-2) + `"`
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := registry.OpenStorage(t.TempDir(), registry.StorageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := registry.New(registry.Options{Storage: st, Observer: stepCanceller{cancel}})
	if err != nil {
		t.Fatal(err)
	}
	hosttest.OpenLocation(t, r2, "/ws")
	register(t, r2, registry.Batch{Location: "/ws", Source: pluginSrc, Tools: map[string]sdk.Tool{"heavy": schemaTool(schema)}})
	q2, err := r2.Prepare("/ws")
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	s, err := q2.Settle(ctx, registry.Call{Name: "heavy", Input: json.RawMessage(input)})
	took := time.Since(began)
	t.Logf("settled in %s: %v %v", took, s, err)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("settle = %v, %v; want it interrupted by its cancellation", s, err)
	}
	for registry.ValidatingApart() > 0 { // the abandoned validation finishes by itself
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("the validation it stopped waiting for took %s", time.Since(began))
}

// Validations a source's calls leave running when they are cancelled count against
// the source's limit until they end: past MaxValidationsApart running, a call is
// refused before validating, naming the source; once they end, calls run again.
func TestAbandonedValidationsAreBounded(t *testing.T) {
	r := hosttest.Registry(t, registry.Options{})
	hosttest.OpenLocation(t, r, "/ws")
	register(t, r, registry.Batch{Location: "/ws", Source: pluginSrc, Tools: map[string]sdk.Tool{"heavy": schemaTool(heavyPattern(1000))}})
	q, err := r.Prepare("/ws")
	if err != nil {
		t.Fatal(err)
	}
	slow := json.RawMessage(`"` + strings.Repeat("a", registry.MaxHeavyValueBytes-2) + `"`)
	ctx, cancel := context.WithCancel(t.Context())
	settled := make(chan error, registry.MaxValidationsApart)
	for range registry.MaxValidationsApart {
		go func() {
			_, err := q.Settle(ctx, registry.Call{Name: "heavy", Input: slow})
			settled <- err
		}()
	}
	for registry.ValidatingApart() < registry.MaxValidationsApart {
		runtime.Gosched()
	}
	cancel()
	for range registry.MaxValidationsApart {
		if err := <-settled; !errors.Is(err, context.Canceled) {
			t.Errorf("a cancelled settlement: %v; want it interrupted", err)
		}
	}
	_, err = q.Settle(t.Context(), registry.Call{Name: "heavy", Input: json.RawMessage(`"aaa"`)})
	var busy *registry.ValidationsBusyError
	running := registry.ValidatingApart()
	if !errors.As(err, &busy) || !strings.Contains(err.Error(), pluginSrc.String()) {
		t.Errorf("a call while %d abandoned validations run: %v; want it refused naming the source", running, err)
	}
	for registry.ValidatingApart() > 0 {
		time.Sleep(10 * time.Millisecond)
	}
	if s := settle(t, q, "heavy", `"aaa"`); s.Outcome != registry.Completed {
		t.Errorf("once they ended: %s %q", s.Outcome, s.Text())
	}
}
