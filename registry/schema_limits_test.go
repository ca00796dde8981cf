package registry_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/toolhost/toolhost/internal/hosttest"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sdk"
)

// nested is a schema nested depth deep through "items": 10 bytes a level.
func nested(depth int) json.RawMessage {
	return json.RawMessage(strings.Repeat(`{"items":`, depth) + "{}" + strings.Repeat("}", depth))
}

// wide is an object schema with n properties, two subschemas each.
func wide(n int) json.RawMessage {
	var b strings.Builder
	b.WriteString(`{"type":"object","properties":{`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"p%d":{"items":{}}`, i)
	}
	b.WriteString("}}")
	return json.RawMessage(b.String())
}

func schemaTool(in json.RawMessage) sdk.Tool {
	return sdk.Tool{InputSchema: in, Execute: nopExecute}
}

// A schema whose compiling would take minutes is refused by its measure, before it
// is decoded: few allocations, whatever its size, with an error naming the limit.
// (Compiled, the 9,000-deep schema took more than ten minutes, the 40,000
// properties six; this test would time out.)
func TestCostlySchemasAreRefusedBeforeCompiling(t *testing.T) {
	for _, tt := range []struct {
		name   string
		schema json.RawMessage
		want   string
	}{
		{"Nested9000Deep", nested(9000), fmt.Sprintf("nest more than %d deep", registry.MaxSchemaDepth)},
		{"Nested2000Deep", nested(2000), fmt.Sprintf("nest more than %d deep", registry.MaxSchemaDepth)},
		{"NestedJustOverTheLimit", nested(registry.MaxSchemaDepth), fmt.Sprintf("nest more than %d deep", registry.MaxSchemaDepth)},
		{"FortyThousandProperties", wide(40000), fmt.Sprintf("more than %d subschemas", registry.MaxSchemaNodes)},
		{"BooleanSubschemas", json.RawMessage(`{"anyOf":[` + strings.Repeat("true,", registry.MaxSchemaNodes) + `true]}`), fmt.Sprintf("more than %d subschemas", registry.MaxSchemaNodes)},
		{"OverAMebibyte", json.RawMessage(`{"description":"` + strings.Repeat("x", registry.MaxSchemaBytes) + `"}`), fmt.Sprintf("over the limit of %d", registry.MaxSchemaBytes)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := hosttest.Registry(t, registry.Options{})
			hosttest.OpenLocation(t, r, "/ws")
			b := registry.Batch{Location: "/ws", Source: pluginSrc, Tools: map[string]sdk.Tool{"t": schemaTool(tt.schema)}}
			_, err := r.Register(b)
			var rerr *registry.RegistrationError
			if !errors.Is(err, registry.ErrSchemaTooComplex) || !errors.As(err, &rerr) || rerr.Tool != "t" || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v; want the tool refused with %q", err, tt.want)
			}
			t.Log(err)
			allocs := testing.AllocsPerRun(3, func() { r.Register(b) })
			if allocs > 40 {
				t.Errorf("refusing it took %.0f allocations: it was decoded or compiled", allocs)
			}
		})
	}
	t.Run("TheLimitsThemselvesCompile", func(t *testing.T) {
		r := hosttest.Registry(t, registry.Options{})
		hosttest.OpenLocation(t, r, "/ws")
		register(t, r, registry.Batch{Location: "/ws", Source: pluginSrc, Tools: map[string]sdk.Tool{
			"deep": schemaTool(nested(registry.MaxSchemaDepth - 1)),
			"wide": schemaTool(wide((registry.MaxSchemaNodes - 2) / 2)),
			"text": schemaTool(json.RawMessage(`{"type":"object","properties":{"s":{"type":"string","default":"{[{[true false"}}}`)),
		}})
	})
	t.Run("ABatchOverItsTotalIsRefusedBeforeCompiling", func(t *testing.T) {
		r := hosttest.Registry(t, registry.Options{})
		hosttest.OpenLocation(t, r, "/ws")
		tools := map[string]sdk.Tool{}
		for i := range registry.MaxBatchSchemaNodes/registry.MaxSchemaNodes + 1 {
			tools[fmt.Sprintf("t%d", i)] = schemaTool(wide((registry.MaxSchemaNodes - 2) / 2))
		}
		b := registry.Batch{Location: "/ws", Source: pluginSrc, Tools: tools}
		_, err := r.Register(b)
		if !errors.Is(err, registry.ErrSchemaTooComplex) || !strings.Contains(err.Error(), fmt.Sprint(registry.MaxBatchSchemaNodes)) {
			t.Fatalf("err = %v; want the batch refused naming its limit", err)
		}
		if allocs := testing.AllocsPerRun(3, func() { r.Register(b) }); allocs > 100 {
			t.Errorf("refusing it took %.0f allocations: something was compiled", allocs)
		}
	})
	t.Run("TooManyToolsAreRefusedBeforeCompiling", func(t *testing.T) {
		r := hosttest.Registry(t, registry.Options{})
		hosttest.OpenLocation(t, r, "/ws")
		tools := map[string]sdk.Tool{}
		for i := range 10000 {
			tools[fmt.Sprintf("t%d", i)] = schemaTool(json.RawMessage(fmt.Sprintf(`{"type":"object","title":"%d"}`, i)))
		}
		b := registry.Batch{Location: "/ws", Source: pluginSrc, Tools: tools}
		_, err := r.Register(b)
		var lerr *registry.LimitError
		if !errors.As(err, &lerr) || lerr.Limit != "max_tools" || lerr.Value != 10000 {
			t.Fatalf("err = %v; want max_tools", err)
		}
		// Listing and sorting the names is all it costs.
		if allocs := testing.AllocsPerRun(3, func() { r.Register(b) }); allocs > 50 {
			t.Errorf("refusing it took %.0f allocations: something was compiled", allocs)
		}
	})
}
