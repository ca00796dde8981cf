// Package provider checks tool definitions against the limits of model providers'
// tool-calling APIs, and adapts them where that is safe.
//
// toolhost's own name grammar (^[A-Za-z][A-Za-z0-9_-]{0,63}$) already fits every
// profile; the checks still apply it per profile, because definitions can come from
// elsewhere (MCP servers' run-time schemas are the usual offenders). A definition
// that fails a check would make the provider refuse the whole model request, so each
// problem is reported per tool, with a JSON pointer into the input schema.
//
// The profiles, as the providers document them:
//
//   - openai (Chat Completions and Responses function tools): the name matches
//     ^[a-zA-Z0-9_-]{1,64}$; the description is at most 1024 characters (the limit
//     the API enforced through 2025: "string_above_max_length"); parameters are a
//     JSON Schema whose top level has type "object" and no anyOf, oneOf, allOf, enum
//     or not.
//   - anthropic (Messages API custom tools): the name matches ^[a-zA-Z0-9_-]{1,64}$;
//     input_schema has type "object" at the top level and no oneOf, allOf or anyOf
//     there ("input_schema does not support oneOf, allOf, or anyOf at the top level").
//   - gemini (FunctionDeclaration.parameters, an OpenAPI 3.0 Schema subset): the
//     name starts with a letter or an underscore, then letters, digits, underscores,
//     dots, colons or dashes, at most 64 characters in all; the top level has type
//     "object"; property names match ^[A-Za-z_][A-Za-z0-9_]{0,63}$; and only these
//     schema fields are understood: type (one type name, not a list), format, title,
//     description, nullable, enum (strings only), items, properties, required,
//     minItems, maxItems, minProperties, maxProperties, minLength, maxLength,
//     pattern, minimum, maximum, anyOf, propertyOrdering, default, example. Any other
//     field makes the API refuse the request ("Unknown name ... Cannot find field").
//
// Adaptation (gemini only): keywords that only restrict or annotate, and that the
// host enforces anyway when it validates each input against the original schema, are
// rewritten or dropped: $schema, $id, $comment, $anchor, additionalProperties,
// unevaluatedProperties, examples, deprecated, readOnly, writeOnly, contentEncoding,
// contentMediaType are dropped; exclusiveMinimum and exclusiveMaximum become minimum
// and maximum (the model is told a bound one step looser than the truth);
// uniqueItems and multipleOf are dropped; const becomes a one-value enum (strings)
// and type ["T", "null"] becomes type T with nullable; local references
// (#/$defs/..., #/definitions/...) are inlined unless recursive. What cannot be
// expressed (oneOf, allOf, not, if/then/else, patternProperties, dependentRequired,
// prefixItems, contains, recursive references, remote references, non-string enum
// values, type lists of two real types) is reported as a problem and left in place.
// The model is then told a looser contract than the host enforces; an input that
// breaks the stricter one settles invalid_input with the reason, which is what a
// model recovers from.
package provider

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// Profile names a provider's tool-calling API.
type Profile string

// The profiles Check knows.
const (
	// None applies no checks and no adaptation.
	None      Profile = ""
	OpenAI    Profile = "openai"
	Anthropic Profile = "anthropic"
	Gemini    Profile = "gemini"
)

// Profiles lists the known profiles other than None.
var Profiles = []Profile{OpenAI, Anthropic, Gemini}

// Parse returns the profile named s ("" is None). Unknown names are an error that
// lists the known ones.
func Parse(s string) (Profile, error) {
	p := Profile(strings.ToLower(strings.TrimSpace(s)))
	if p == None || slices.Contains(Profiles, p) {
		return p, nil
	}
	return None, fmt.Errorf("provider: unknown provider profile %q (want openai, anthropic or gemini)", s)
}

// Problem is one reason a definition does not suit a provider.
type Problem struct {
	// Pointer is the JSON pointer into the input schema of the offending value; ""
	// when the problem is the name or the description.
	Pointer string `json:"pointer,omitempty"`
	Message string `json:"message"`
}

func (p Problem) String() string {
	if p.Pointer == "" {
		return p.Message
	}
	return p.Pointer + ": " + p.Message
}

// Tool is what Check needs of a definition.
type Tool struct {
	Name        string
	Description string
	// InputSchema is the JSON Schema of the input.
	InputSchema json.RawMessage
}

// MaxOpenAIDescription is the longest description the openai profile accepts, in
// characters.
const MaxOpenAIDescription = 1024

// The profiles' name grammars, compiled on first use: their counted repetitions
// make compiling them cost enough to show in every toolhost command's start.
var (
	openAIName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`) })
	geminiName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_.:-]{0,63}$`) })
	geminiProp = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`) })
)

// Check checks t against profile p. It returns the input schema to advertise (for
// gemini adapted as the package doc says, canonical JSON; otherwise t.InputSchema
// unchanged) and the problems, sorted by pointer. A schema that is not valid JSON is
// returned unchanged with one problem. Check never modifies t. With None it returns
// t.InputSchema and no problems.
func Check(p Profile, t Tool) (json.RawMessage, []Problem) {
	if p == None {
		return t.InputSchema, nil
	}
	var c checker
	switch p {
	case OpenAI, Anthropic:
		if !openAIName().MatchString(t.Name) {
			c.add("", "name %q does not match %s: 1 to 64 letters, digits, underscores or dashes", t.Name, openAIName())
		}
		if n := utf8.RuneCountInString(t.Description); p == OpenAI && n > MaxOpenAIDescription {
			c.add("", "description has %d characters; %s accepts at most %d", n, p, MaxOpenAIDescription)
		}
	case Gemini:
		if !geminiName().MatchString(t.Name) {
			c.add("", "name %q must start with a letter or an underscore, then letters, digits, underscores, dots, colons or dashes, 64 characters at most", t.Name)
		}
	default:
		return t.InputSchema, []Problem{{Message: fmt.Sprintf("unknown provider profile %q", p)}}
	}

	root, err := decode(t.InputSchema)
	if err != nil {
		c.add("", "input schema is not valid JSON: %v", err)
		return t.InputSchema, c.problems
	}
	obj, ok := root.(map[string]any)
	if !ok {
		c.add("", "input schema must be a JSON object with type \"object\"")
		return t.InputSchema, c.problems
	}
	if p == Gemini {
		c.root = obj
		adapted := c.adapt(obj, "", nil).(map[string]any)
		c.checkTop(p, adapted)
		out, err := encode(adapted)
		if err != nil {
			c.add("", "input schema cannot be encoded: %v", err)
			return t.InputSchema, c.sorted()
		}
		return out, c.sorted()
	}
	c.checkTop(p, obj)
	return t.InputSchema, c.sorted()
}

type checker struct {
	problems []Problem
	root     map[string]any
	inlined  int // references inlined so far, bounded by maxInlines
}

// maxInlines bounds reference inlining, so a schema whose references fan out (each
// definition referring to the next twice) cannot blow up exponentially.
const maxInlines = 1000

func (c *checker) add(pointer, format string, args ...any) {
	c.problems = append(c.problems, Problem{Pointer: pointer, Message: fmt.Sprintf(format, args...)})
}

func (c *checker) sorted() []Problem {
	slices.SortStableFunc(c.problems, func(a, b Problem) int { return strings.Compare(a.Pointer, b.Pointer) })
	return c.problems
}

// checkTop applies the top-level rules every profile shares.
func (c *checker) checkTop(p Profile, obj map[string]any) {
	if ty, ok := obj["type"].(string); !ok || ty != "object" {
		c.add("/type", "the top level of the input schema must have type \"object\", not %s", describe(obj["type"]))
	}
	forbidden := []string{"anyOf", "oneOf", "allOf"}
	if p == OpenAI {
		forbidden = append(forbidden, "enum", "not")
	}
	for _, k := range forbidden {
		if _, ok := obj[k]; ok {
			c.add("/"+k, "%s does not accept %q at the top level of the input schema", p, k)
		}
	}
}

func describe(v any) string {
	if v == nil {
		return "none"
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// geminiFields are the schema fields Gemini's parameters understand.
var geminiFields = map[string]bool{
	"type": true, "format": true, "title": true, "description": true, "nullable": true,
	"enum": true, "items": true, "properties": true, "required": true,
	"minItems": true, "maxItems": true, "minProperties": true, "maxProperties": true,
	"minLength": true, "maxLength": true, "pattern": true, "minimum": true, "maximum": true,
	"anyOf": true, "propertyOrdering": true, "default": true, "example": true,
}

// geminiDropped are keywords that only restrict or annotate: dropped for gemini (the
// host still enforces them).
var geminiDropped = map[string]bool{
	"$schema": true, "$id": true, "$comment": true, "$anchor": true, "$defs": true, "definitions": true,
	"additionalProperties": true, "unevaluatedProperties": true, "unevaluatedItems": true,
	"examples": true, "deprecated": true, "readOnly": true, "writeOnly": true,
	"contentEncoding": true, "contentMediaType": true, "uniqueItems": true, "multipleOf": true,
	"$dynamicAnchor": true, "$vocabulary": true,
}

// adapt returns v (a schema at pointer ptr) rewritten for gemini, recording what it
// cannot express. refs are the references being inlined (to stop recursion).
func (c *checker) adapt(v any, ptr string, refs []string) any {
	s, ok := v.(map[string]any)
	if !ok {
		if b, isBool := v.(bool); isBool {
			if !b {
				c.add(ptr, "gemini cannot express the schema false (nothing is valid)")
			}
			return map[string]any{} // true: anything
		}
		c.add(ptr, "a schema must be an object")
		return v
	}
	if ref, ok := s["$ref"].(string); ok {
		target, err := c.resolve(ref)
		switch {
		case err != nil:
			c.add(ptr+"/$ref", "%v", err)
		case slices.Contains(refs, ref):
			c.add(ptr+"/$ref", "gemini cannot express the recursive reference %q", ref)
		case c.inlined >= maxInlines:
			c.add(ptr+"/$ref", "gemini: not inlining %q: the schema's references expand to more than %d copies", ref, maxInlines)
		default:
			c.inlined++
			merged := map[string]any{}
			for k, val := range target {
				merged[k] = val
			}
			for k, val := range s { // siblings of $ref (2020-12) apply too
				if k != "$ref" {
					merged[k] = val
				}
			}
			return c.adapt(merged, ptr, append(slices.Clip(refs), ref))
		}
	}
	out := map[string]any{}
	for _, k := range sortedKeys(s) {
		val := s[k]
		at := ptr + "/" + escape(k)
		switch k {
		case "properties":
			props, ok := val.(map[string]any)
			if !ok {
				c.add(at, "properties must be an object")
				continue
			}
			adapted := map[string]any{}
			for _, name := range sortedKeys(props) {
				if !geminiProp().MatchString(name) {
					c.add(at+"/"+escape(name), "gemini property names must match %s", geminiProp())
				}
				adapted[name] = c.adapt(props[name], at+"/"+escape(name), refs)
			}
			out[k] = adapted
		case "items":
			if list, ok := val.([]any); ok { // draft 4-2019 tuple form
				c.add(at, "gemini cannot express a tuple (items as a list)")
				out[k] = list
				continue
			}
			out[k] = c.adapt(val, at, refs)
		case "anyOf":
			list, ok := val.([]any)
			if !ok {
				c.add(at, "anyOf must be a list")
				continue
			}
			adapted := make([]any, len(list))
			for i, sub := range list {
				adapted[i] = c.adapt(sub, at+"/"+strconv.Itoa(i), refs)
			}
			out[k] = adapted
		case "type":
			c.adaptType(out, val, at)
		case "const":
			if str, ok := val.(string); ok {
				out["enum"] = []any{str}
			} else {
				c.add(at, "gemini enums hold strings only; cannot express const %s", describe(val))
				out[k] = val
			}
		case "enum":
			list, ok := val.([]any)
			if !ok {
				c.add(at, "enum must be a list")
				continue
			}
			for i, e := range list {
				if _, ok := e.(string); !ok {
					c.add(at+"/"+strconv.Itoa(i), "gemini enums hold strings only, not %s", describe(e))
				}
			}
			out[k] = val
		case "exclusiveMinimum", "exclusiveMaximum":
			bound := "minimum"
			if k == "exclusiveMaximum" {
				bound = "maximum"
			}
			if _, isNum := val.(json.Number); isNum {
				if _, has := s[bound]; !has {
					out[bound] = val
				}
			} // draft 4's boolean form only qualifies minimum/maximum: drop it
		case "$ref":
			// Unresolvable reference, reported above; keep it so the problem is visible.
			out[k] = val
		default:
			switch {
			case geminiDropped[k]:
			case geminiFields[k]:
				out[k] = val
			default:
				c.add(at, "gemini does not support the schema keyword %q", k)
				out[k] = val
			}
		}
	}
	return out
}

// adaptType writes type (and nullable) for gemini: one type name, ["T", "null"] as
// T plus nullable.
func (c *checker) adaptType(out map[string]any, val any, at string) {
	switch t := val.(type) {
	case string:
		if t == "null" {
			c.add(at, "gemini has no null type")
		}
		out["type"] = t
	case []any:
		var real []string
		null := false
		for _, x := range t {
			switch name, _ := x.(string); name {
			case "null":
				null = true
			default:
				real = append(real, name)
			}
		}
		switch {
		case len(real) == 1:
			out["type"] = real[0]
			if null {
				out["nullable"] = true
			}
		default:
			c.add(at, "gemini takes one type name, not %s", describe(val))
			out["type"] = val
		}
	default:
		c.add(at, "type must be a string or a list of strings")
		out["type"] = val
	}
}

// resolve finds a local reference in the root schema.
func (c *checker) resolve(ref string) (map[string]any, error) {
	if !strings.HasPrefix(ref, "#/") {
		return nil, fmt.Errorf("gemini cannot follow the reference %q: only local references (#/...) can be inlined", ref)
	}
	var cur any = c.root
	for _, tok := range strings.Split(ref[2:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("reference %q does not resolve", ref)
		}
		if cur, ok = m[tok]; !ok {
			return nil, fmt.Errorf("reference %q does not resolve", ref)
		}
	}
	m, ok := cur.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("reference %q does not name a schema object", ref)
	}
	return m, nil
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func escape(tok string) string {
	return strings.ReplaceAll(strings.ReplaceAll(tok, "~", "~0"), "/", "~1")
}

func decode(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("trailing data after the schema")
	}
	return v, nil
}

// encode writes canonical JSON: sorted keys (encoding/json sorts map keys), no
// insignificant space, no HTML escaping.
func encode(v any) (json.RawMessage, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}
