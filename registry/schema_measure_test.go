package registry

import (
	"encoding/json"
	"testing"
)

// measureSchema's count and depth agree with the decoded document's.
func FuzzMeasureSchema(f *testing.F) {
	for _, s := range []string{`{}`, `true`, `{"a":[1,true,{"b":"}\"{"}],"c":false}`, `[[[[]]]]`, `{"s":"\\\\"}`, `{"x":null,"y":"tf"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var doc any
		if json.Unmarshal(raw, &doc) != nil {
			measureSchema("schema", raw) // must not panic
			return
		}
		var nodes, depth func(any) int
		nodes = func(v any) int {
			switch v := v.(type) {
			case map[string]any:
				n := 1
				for _, x := range v {
					n += nodes(x)
				}
				return n
			case []any:
				n := 0
				for _, x := range v {
					n += nodes(x)
				}
				return n
			case bool:
				return 1
			}
			return 0
		}
		depth = func(v any) int {
			d := 0
			switch v := v.(type) {
			case map[string]any:
				for _, x := range v {
					d = max(d, depth(x))
				}
				return d + 1
			case []any:
				for _, x := range v {
					d = max(d, depth(x))
				}
				return d + 1
			}
			return 0
		}
		n, err := measureSchema("schema", raw)
		switch {
		case depth(doc) > MaxSchemaDepth || nodes(doc) > MaxSchemaNodes || len(raw) > MaxSchemaBytes:
			if err == nil {
				t.Fatalf("%q: measured %d, no error; want it over a limit", raw, n)
			}
		case err != nil || n != nodes(doc):
			t.Fatalf("%q: measured %d, %v; want %d", raw, n, err, nodes(doc))
		}
	})
}
