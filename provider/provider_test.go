package provider_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/toolhost/toolhost/provider"
)

const objectSchema = `{"additionalProperties":false,"properties":{"text":{"type":"string"}},"required":["text"],"type":"object"}`

func TestParse(t *testing.T) {
	for _, s := range []string{"", "openai", "Anthropic", " gemini "} {
		if _, err := provider.Parse(s); err != nil {
			t.Errorf("Parse(%q): %v", s, err)
		}
	}
	if _, err := provider.Parse("llama"); err == nil || !strings.Contains(err.Error(), "openai, anthropic or gemini") {
		t.Errorf("Parse(llama) = %v, want an error listing the profiles", err)
	}
}

// messages returns "pointer: message" for each problem.
func messages(ps []provider.Problem) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.String())
	}
	return out
}

func TestCheck(t *testing.T) {
	long := strings.Repeat("d", provider.MaxOpenAIDescription+1)
	tests := []struct {
		name    string
		profile provider.Profile
		tool    provider.Tool
		want    []string // substrings, one per expected problem, in order
	}{
		{"NoneChecksNothing", provider.None, provider.Tool{Name: "bad name!", InputSchema: json.RawMessage(`"x"`)}, nil},
		{"OpenAIAcceptsAnObjectTool", provider.OpenAI, provider.Tool{Name: "read_file", InputSchema: json.RawMessage(objectSchema)}, nil},
		{"OpenAINameCharset", provider.OpenAI, provider.Tool{Name: "files.read", InputSchema: json.RawMessage(objectSchema)}, []string{`name "files.read" does not match`}},
		{"OpenAINameLength", provider.OpenAI, provider.Tool{Name: strings.Repeat("a", 65), InputSchema: json.RawMessage(objectSchema)}, []string{"does not match"}},
		{"OpenAIDescriptionLength", provider.OpenAI, provider.Tool{Name: "t", Description: long, InputSchema: json.RawMessage(objectSchema)}, []string{"description has 1025 characters"}},
		{"AnthropicAllowsLongDescriptions", provider.Anthropic, provider.Tool{Name: "t", Description: long, InputSchema: json.RawMessage(objectSchema)}, nil},
		{"TopLevelMustBeObject", provider.Anthropic, provider.Tool{Name: "t", InputSchema: json.RawMessage(`{"type":"string"}`)}, []string{`/type: the top level of the input schema must have type "object", not "string"`}},
		{"TopLevelTypeMissing", provider.OpenAI, provider.Tool{Name: "t", InputSchema: json.RawMessage(`{"properties":{}}`)}, []string{"not none"}},
		{"SchemaNotAnObject", provider.OpenAI, provider.Tool{Name: "t", InputSchema: json.RawMessage(`true`)}, []string{"must be a JSON object"}},
		{"SchemaNotJSON", provider.Gemini, provider.Tool{Name: "t", InputSchema: json.RawMessage(`{`)}, []string{"not valid JSON"}},
		{"AnthropicTopLevelCombinators", provider.Anthropic, provider.Tool{Name: "t", InputSchema: json.RawMessage(`{"type":"object","anyOf":[{"required":["a"]},{"required":["b"]}]}`)}, []string{`/anyOf: anthropic does not accept "anyOf"`}},
		{"OpenAITopLevelEnum", provider.OpenAI, provider.Tool{Name: "t", InputSchema: json.RawMessage(`{"type":"object","not":{"required":["a"]}}`)}, []string{`/not: openai does not accept "not"`}},
		{"GeminiNameMayHoldDots", provider.Gemini, provider.Tool{Name: "files.read", InputSchema: json.RawMessage(objectSchema)}, nil},
		{"GeminiNameMustStartWithLetter", provider.Gemini, provider.Tool{Name: "9lives", InputSchema: json.RawMessage(objectSchema)}, []string{"must start with a letter"}},
		{"GeminiUnsupportedKeywords", provider.Gemini, provider.Tool{Name: "t", InputSchema: json.RawMessage(
			`{"type":"object","properties":{"a":{"oneOf":[{"type":"string"},{"type":"integer"}]},"b":{"type":"object","patternProperties":{"^x":{}}}}}`)},
			[]string{`/properties/a/oneOf: gemini does not support the schema keyword "oneOf"`, `/properties/b/patternProperties: gemini does not support`}},
		{"GeminiPropertyNames", provider.Gemini, provider.Tool{Name: "t", InputSchema: json.RawMessage(`{"type":"object","properties":{"file-name":{"type":"string"}}}`)}, []string{"/properties/file-name: gemini property names"}},
		{"GeminiEnumStringsOnly", provider.Gemini, provider.Tool{Name: "t", InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer","enum":[1,2]}}}`)},
			[]string{"/properties/n/enum/0: gemini enums hold strings only", "/properties/n/enum/1:"}},
		{"GeminiTypeList", provider.Gemini, provider.Tool{Name: "t", InputSchema: json.RawMessage(`{"type":"object","properties":{"v":{"type":["string","integer"]}}}`)}, []string{"/properties/v/type: gemini takes one type name"}},
		{"GeminiRecursiveRef", provider.Gemini, provider.Tool{Name: "t", InputSchema: json.RawMessage(
			`{"$defs":{"node":{"type":"object","properties":{"next":{"$ref":"#/$defs/node"}}}},"type":"object","properties":{"head":{"$ref":"#/$defs/node"}}}`)},
			[]string{`/properties/head/properties/next/$ref: gemini cannot express the recursive reference`}},
		{"GeminiRemoteRef", provider.Gemini, provider.Tool{Name: "t", InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"$ref":"https://example.com/s.json"}}}`)}, []string{"only local references"}},
		{"GeminiFalseSchema", provider.Gemini, provider.Tool{Name: "t", InputSchema: json.RawMessage(`{"type":"object","properties":{"never":false}}`)}, []string{"/properties/never: gemini cannot express the schema false"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, problems := provider.Check(tt.profile, tt.tool)
			got := messages(problems)
			if len(got) != len(tt.want) {
				t.Fatalf("problems %q, want %d matching %q", got, len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("problem %d is %q, want it to contain %q", i, got[i], w)
				}
			}
		})
	}
}

func TestCheckLeavesOtherProfilesSchemasUntouched(t *testing.T) {
	in := json.RawMessage(` {"type": "object", "additionalProperties": false} `)
	for _, p := range []provider.Profile{provider.None, provider.OpenAI, provider.Anthropic} {
		if out, _ := provider.Check(p, provider.Tool{Name: "t", InputSchema: in}); string(out) != string(in) {
			t.Errorf("%q changed the schema to %s", p, out)
		}
	}
}

func TestGeminiAdaptation(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{
			name: "DropsRestrictionsTheHostEnforces",
			in:   `{"$schema":"https://json-schema.org/draft/2020-12/schema","$id":"x","additionalProperties":false,"properties":{"tags":{"items":{"type":"string"},"type":"array","uniqueItems":true}},"type":"object"}`,
			want: `{"properties":{"tags":{"items":{"type":"string"},"type":"array"}},"type":"object"}`,
		},
		{
			name: "NullableTypeAndConst",
			in:   `{"properties":{"mode":{"const":"fast"},"note":{"type":["string","null"]}},"type":"object"}`,
			want: `{"properties":{"mode":{"enum":["fast"]},"note":{"nullable":true,"type":"string"}},"type":"object"}`,
		},
		{
			name: "ExclusiveBoundsBecomeInclusive",
			in:   `{"properties":{"n":{"exclusiveMinimum":0,"maximum":10,"exclusiveMaximum":11,"type":"number"}},"type":"object"}`,
			want: `{"properties":{"n":{"maximum":10,"minimum":0,"type":"number"}},"type":"object"}`,
		},
		{
			name: "InlinesLocalReferences",
			in:   `{"$defs":{"point":{"additionalProperties":false,"properties":{"x":{"type":"integer"}},"type":"object"}},"properties":{"at":{"$ref":"#/$defs/point","description":"where"}},"type":"object"}`,
			want: `{"properties":{"at":{"description":"where","properties":{"x":{"type":"integer"}},"type":"object"}},"type":"object"}`,
		},
		{
			name: "KeepsBigNumbersExact",
			in:   `{"properties":{"n":{"maximum":12345678901234567890,"type":"integer"}},"type":"object"}`,
			want: `{"properties":{"n":{"maximum":12345678901234567890,"type":"integer"}},"type":"object"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, problems := provider.Check(provider.Gemini, provider.Tool{Name: "t", InputSchema: json.RawMessage(tt.in)})
			if len(problems) != 0 {
				t.Fatalf("problems %q", messages(problems))
			}
			if string(out) != tt.want {
				t.Errorf("adapted\n %s\nwant\n %s", out, tt.want)
			}
			again, _ := provider.Check(provider.Gemini, provider.Tool{Name: "t", InputSchema: out})
			if string(again) != string(out) {
				t.Errorf("adaptation is not idempotent: %s then %s", out, again)
			}
		})
	}
}

func FuzzCheck(f *testing.F) {
	f.Add([]byte(objectSchema), "t")
	f.Add([]byte(`{"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`), "x.y")
	f.Add([]byte(`{"type":["null"],"items":[true,false],"enum":[{}]}`), "")
	f.Fuzz(func(t *testing.T, schema []byte, name string) {
		for _, p := range provider.Profiles {
			out, problems := provider.Check(p, provider.Tool{Name: name, InputSchema: schema})
			if p == provider.Gemini && json.Valid(schema) && !json.Valid(out) {
				t.Fatalf("gemini adaptation of %s is not JSON: %s", schema, out)
			}
			for _, pr := range problems {
				if pr.Message == "" {
					t.Fatalf("empty problem for %s", schema)
				}
			}
		}
	})
}

func TestGeminiInliningIsBounded(t *testing.T) {
	// Each definition refers to the next twice: 2^30 copies if inlined naively.
	var defs []string
	for i := range 30 {
		defs = append(defs, fmt.Sprintf(`"d%d":{"type":"object","properties":{"a":{"$ref":"#/$defs/d%d"},"b":{"$ref":"#/$defs/d%d"}}}`, i, i+1, i+1))
	}
	defs = append(defs, `"d30":{"type":"string"}`)
	schema := `{"$defs":{` + strings.Join(defs, ",") + `},"type":"object","properties":{"root":{"$ref":"#/$defs/d0"}}}`
	out, problems := provider.Check(provider.Gemini, provider.Tool{Name: "t", InputSchema: json.RawMessage(schema)})
	if len(problems) == 0 || !strings.Contains(problems[0].Message, "more than") {
		t.Fatalf("problems %q, want the inlining bound reported", messages(problems))
	}
	if len(out) > 1<<20 {
		t.Fatalf("adapted schema is %d bytes", len(out))
	}
}
