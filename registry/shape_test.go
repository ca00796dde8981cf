package registry

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/toolhost/toolhost/internal/jsoncodec"
	"github.com/toolhost/toolhost/sdk"
)

// The schemas typed tools derive, and neighbours just inside and just outside the
// subset shapeCheck decides.
var shapeSchemas = []string{
	`true`, `{}`, `{"type":"string"}`, `{"type":"integer","description":"n"}`, `{"type":"null"}`,
	`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false}`,
	`{"type":"object","properties":{"n":{"type":"integer"},"f":{"type":"number"},"b":{"type":"boolean"}}}`,
	`{"type":"object","properties":{"tags":{"type":"array","items":{"type":"string"}}},"additionalProperties":{"type":"integer"}}`,
	`{"type":"object","properties":{"o":{"type":"object","properties":{"x":{}},"required":["x","y"]}},"required":["o"]}`,
	`{"type":"array","items":{"type":"array","items":true}}`, `{"type":"object","additionalProperties":true}`,
	`{"type":"string","minLength":2}`, `{"type":["string","null"]}`, `{"enum":[1,2]}`, `{"properties":{"a":{"type":"string"}}}`,
	`{"type":"string","format":"email"}`, `{"type":"object","$defs":{"x":{}},"properties":{"a":{"$ref":"#/$defs/x"}}}`,
	`false`, `{"type":"object","properties":{"a":false}}`, `{"type":"object","patternProperties":{"^a":{"type":"string"}}}`,
}

// FuzzShapeCheckAgreesWithValidator holds shapeCheck to the validator's verdict on
// every schema it decides and every value.
func FuzzShapeCheckAgreesWithValidator(f *testing.F) {
	values := []string{`{"text":"hi"}`, `{"text":1}`, `{"text":"hi","x":2}`, `{}`, `[]`, `"s"`, `1`, `1.0`, `1.5`, `1e300`,
		`null`, `true`, `{"n":2,"f":0.5,"b":false}`, `{"n":2.5}`, `{"tags":["a",1],"z":3}`, `{"tags":[],"z":3.5}`,
		`{"o":{"x":1,"y":null}}`, `{"o":{"x":1}}`, `[[1],[]]`, `[1]`, `{"a":"x"}`, `{"a":1}`}
	for _, s := range shapeSchemas {
		for _, v := range values {
			f.Add(s, v)
		}
	}
	f.Fuzz(func(t *testing.T, schema, value string) {
		cs, err := compileSchema("schema", json.RawMessage(schema))
		if err != nil || cs.quick == nil {
			return
		}
		var v any
		if jsoncodec.UnmarshalNoCopy([]byte(value), &v) != nil {
			return
		}
		quick, valid := cs.quick(v), cs.schema.Validate(v) == nil
		if quick != valid {
			t.Fatalf("schema %s, value %s: shapeCheck says %v, the validator %v", schema, value, quick, valid)
		}
	})
}

// FuzzCheckTextImpliesValid holds the text check to the full validation: whatever
// text it accepts, validate (decode, shapeCheck, the validator) accepts too.
func FuzzCheckTextImpliesValid(f *testing.F) {
	values := []string{`{"text":"hi"}`, `{"text":1}`, `{"text":"hi","x":2}`, `{}`, `[]`, `"s"`, `1`, `1.0`, `1.5`, `1e3`,
		`-0`, `01`, `null`, `true`, `{"n":2,"f":0.5,"b":false}`, `{"n":2.5}`, `{"tags":["a",1],"z":3}`, `{"tags":[],"z":3.5}`,
		`{"o":{"x":1,"y":null}}`, `{"o":{"x":1}}`, `[[1],[]]`, `[1]`, `{"a":"x"}`, `{"a":1}`, ` {"text" : "a\u00e9\n"} `,
		`{"text":"a","text":2}`, `{"te\u0078t":"a"}`, "{\"text\":\"\xff\"}", `{"text":"a"} x`, `{"text":"a",}`, `[1,]`}
	for _, s := range append(shapeSchemas, `{"type":"object","required":["x"],"additionalProperties":{"type":"integer"}}`) {
		for _, v := range values {
			f.Add(s, v)
		}
	}
	f.Fuzz(func(t *testing.T, schema, value string) {
		cs, err := compileSchema("schema", json.RawMessage(schema))
		if err != nil || cs.text == nil || !cs.text.checkText([]byte(value)) {
			return
		}
		if _, problems := cs.validate([]byte(value)); problems != nil {
			t.Fatalf("schema %s, value %s: the text check accepts, validate finds %v", schema, value, problems)
		}
	})
}

// TestCheckTextDecidesTypedToolInputs: the inputs of typed tools are accepted by
// their text, without a decode.
func TestCheckTextDecidesTypedToolInputs(t *testing.T) {
	type in struct {
		Text  string   `json:"text"`
		Count int      `json:"count,omitempty"`
		Ratio float64  `json:"ratio,omitempty"`
		Tags  []string `json:"tags,omitempty"`
		Loud  bool     `json:"loud,omitempty"`
	}
	cs, err := compileSchema("schema", sdk.SchemaFor[in]())
	if err != nil || cs.text == nil {
		t.Fatalf("%v; text check %v", err, cs.text)
	}
	for _, v := range []string{`{"text":"hi"}`, ` { "text" : "a\"b\u00e9", "count": -3, "ratio": 0.25, "tags": ["x", "y"], "loud": true } `} {
		if !cs.validText([]byte(v)) {
			t.Errorf("%s is not accepted by its text", v)
		}
	}
	for _, v := range []string{`{}`, `{"text":1}`, `{"text":"a","other":1}`, `{"text":"a"`, `{"count":1.5,"text":"a"}`} {
		if cs.validText([]byte(v)) {
			t.Errorf("%s is accepted by its text", v)
		}
	}
}

// TestShapeCheckDecidesTypedToolSchemas: the schemas sdk.SchemaFor derives for plain
// structs, strings and numbers are decided without the validator; the others are
// left to it.
func TestShapeCheckDecidesTypedToolSchemas(t *testing.T) {
	type in struct {
		Text  string   `json:"text" jsonschema:"description=the text"`
		Count int      `json:"count,omitempty"`
		Ratio float64  `json:"ratio,omitempty"`
		Tags  []string `json:"tags,omitempty"`
		Loud  bool     `json:"loud,omitempty"`
	}
	for _, schema := range []json.RawMessage{sdk.SchemaFor[in](), sdk.SchemaFor[string](), sdk.SchemaFor[int](), sdk.SchemaFor[[]string]()} {
		cs, err := compileSchema("schema", schema)
		if err != nil {
			t.Fatal(err)
		}
		if cs.quick == nil {
			t.Errorf("schema %s is left to the validator", schema)
		}
	}
	for i, s := range shapeSchemas {
		var doc any
		_ = json.Unmarshal([]byte(s), &doc)
		decided := shapeCheck(doc) != nil
		if want := i < 11; decided != want {
			t.Errorf("schema %s: decided = %v, want %v", s, decided, want)
		}
	}
}

// TestSchemaCache: the same bytes compile once; errors are never kept; the cache
// stays within its bounds however many distinct schemas arrive.
func TestSchemaCache(t *testing.T) {
	var c schemaCache
	raw := json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`)
	a, err := c.compile("input schema", raw)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := c.compile("output schema", append(json.RawMessage(nil), raw...)); b != a {
		t.Error("the same schema bytes were compiled twice")
	}
	for range 2 {
		if _, err := c.compile("input schema", json.RawMessage(`{"type": 7}`)); err == nil || !strings.Contains(err.Error(), "input schema") {
			t.Fatalf("invalid schema: err = %v", err)
		}
	}
	pad := strings.Repeat("x", 64<<10)
	for i := range 2 * maxCachedSchemaBytes / len(pad) {
		if _, err := c.compile("input schema", json.RawMessage(fmt.Sprintf(`{"description":"%d %s"}`, i, pad))); err != nil {
			t.Fatal(err)
		}
		if c.bytes > maxCachedSchemaBytes {
			t.Fatalf("cache holds %d bytes of schemas, over its %d bound", c.bytes, maxCachedSchemaBytes)
		}
	}
	for i := range 2 * maxCachedSchemas {
		if _, err := c.compile("input schema", json.RawMessage(fmt.Sprintf(`{"description":"%d"}`, i))); err != nil {
			t.Fatal(err)
		}
		if len(c.byRaw) > maxCachedSchemas {
			t.Fatalf("cache holds %d schemas, over its %d bound", len(c.byRaw), maxCachedSchemas)
		}
	}
}
