package tool

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/invopop/jsonschema"
)

type schemaCorpusInner struct {
	Note string             `json:"note" jsonschema:"description=A note with <html> & \"quotes\"\u2028 and \ttabs,example=x<y"`
	Next *schemaCorpusInner `json:"next,omitempty"`
}

type schemaCorpusLevel string

type schemaCorpus struct {
	Text     string                       `json:"text" jsonschema:"title=Text,description=Say it,minLength=1,maxLength=10,pattern=^[a-z]+$,default=abc"`
	Count    int                          `json:"count,omitempty" jsonschema:"minimum=1,maximum=99,exclusiveMaximum=100,multipleOf=3"`
	Ratio    float64                      `json:"ratio" jsonschema:"enum=0.5,enum=1.5"`
	Level    schemaCorpusLevel            `json:"level" jsonschema:"enum=low,enum=high,deprecated=true"`
	Flags    []bool                       `json:"flags" jsonschema:"minItems=1,maxItems=3,uniqueItems=true"`
	Tags     map[string]string            `json:"tags,omitempty"`
	Inner    schemaCorpusInner            `json:"inner"`
	Inners   []*schemaCorpusInner         `json:"inners,omitempty"`
	ByName   map[string]schemaCorpusInner `json:"by_name"`
	When     time.Time                    `json:"when" jsonschema:"readOnly=true"`
	Raw      json.RawMessage              `json:"raw,omitempty"`
	Any      any                          `json:"any"`
	Bytes    []byte                       `json:"bytes" jsonschema:"contentEncoding=base64"`
	Email    string                       `json:"email" jsonschema:"format=email,examples=a@b.c,writeOnly=true"`
	Choice   string                       `json:"choice" jsonschema:"oneof_required=a"`
	Other    string                       `json:"other" jsonschema:"oneof_required=b"`
	Nullable *int                         `json:"nullable" jsonschema:"nullable"`
	Unicode  string                       `json:"ünïcode" jsonschema:"description=é \x01 \u00ff"`
	Ignored  string                       `json:"-"`
}

// TestAppendSchemaAgreesWithJSONMarshal holds appendSchema to json.Marshal: for
// schemas derived as SchemaFor derives them, for every field of jsonschema.Schema
// set on its own (so a field a new version of the library adds fails here), and
// for boolean, empty and extended schemas.
func TestAppendSchemaAgreesWithJSONMarshal(t *testing.T) {
	check := func(name string, s *jsonschema.Schema) {
		t.Helper()
		want, werr := json.Marshal(s)
		got, gerr := appendSchema(nil, s)
		if (werr != nil) != (gerr != nil) || string(got) != string(want) {
			t.Errorf("%s:\n got %s (%v)\nwant %s (%v)", name, got, gerr, want, werr)
		}
	}
	r := jsonschema.Reflector{ExpandedStruct: true, Anonymous: true}
	for _, typ := range []reflect.Type{
		reflect.TypeFor[schemaCorpus](), reflect.TypeFor[schemaCorpusInner](), reflect.TypeFor[string](),
		reflect.TypeFor[[]int](), reflect.TypeFor[map[string]float64](), reflect.TypeFor[struct{}](),
		reflect.TypeFor[*schemaCorpus](), reflect.TypeFor[any](),
	} {
		check(typ.String(), r.ReflectFromType(typ))
	}

	// Every field, one at a time, with a value of its type.
	sub := &jsonschema.Schema{Type: "string", Description: "<sub>"}
	n := uint64(7)
	typ := reflect.TypeFor[jsonschema.Schema]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		if !f.IsExported() {
			continue
		}
		s := &jsonschema.Schema{}
		v := reflect.ValueOf(s).Elem().Field(i)
		switch x := v.Addr().Interface().(type) {
		case *string:
			*x = "v<&>"
		case *jsonschema.ID:
			*x = "urn:x"
		case *bool:
			*x = true
		case **uint64:
			*x = &n
		case *json.Number:
			*x = "1.5"
		case **jsonschema.Schema:
			*x = sub
		case *[]*jsonschema.Schema:
			*x = []*jsonschema.Schema{sub, jsonschema.FalseSchema, nil}
		case *jsonschema.Definitions:
			*x = jsonschema.Definitions{"b": sub, "a": jsonschema.TrueSchema}
		case *map[string]*jsonschema.Schema:
			*x = map[string]*jsonschema.Schema{"b": sub, "a": nil}
		case *[]string:
			*x = []string{"b", "a<"}
		case *map[string][]string:
			*x = map[string][]string{"b": {"x"}, "a": nil}
		case *[]any:
			*x = []any{"s", 1.5, true, nil, map[string]any{"k": "<v>"}}
		case *any:
			*x = map[string]any{"z": 1, "a": []int{1}}
		case *map[string]any:
			*x = map[string]any{"x-b": "<1>", "x-a": nil}
		default:
			if f.Name == "Properties" {
				s.Properties = jsonschema.NewProperties()
				s.Properties.Set("z", sub)
				s.Properties.Set("a", jsonschema.TrueSchema)
				break
			}
			t.Fatalf("field %s of type %s: the test has no value for it", f.Name, f.Type)
		}
		check(f.Name, s)
	}

	check("true", jsonschema.TrueSchema)
	check("false", jsonschema.FalseSchema)
	check("empty", &jsonschema.Schema{})
	check("empty properties", &jsonschema.Schema{Properties: jsonschema.NewProperties()})
	check("empty slices", &jsonschema.Schema{Required: []string{}, Enum: []any{}, Extras: map[string]any{}})
	check("extras only", &jsonschema.Schema{Extras: map[string]any{"x": 1}})
	check("bad number", &jsonschema.Schema{Type: "number", Minimum: "one"})
	var parsed jsonschema.Schema
	if err := json.Unmarshal([]byte(`{"type":"object","properties":{"a":false,"b":true}}`), &parsed); err != nil {
		t.Fatal(err)
	}
	check("parsed booleans", &parsed)
}
