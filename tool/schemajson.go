package tool

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"

	"github.com/invopop/jsonschema"
)

// appendSchema appends the JSON encoding of s, byte for byte what json.Marshal(s)
// produces (TestAppendSchemaAgreesWithJSONMarshal holds it to that), without
// encoding/json's reflection over jsonschema.Schema, whose encoders every plugin
// process would otherwise build on the way to its first activation (BENCHMARKS.md,
// "Activation"). Values of any type (enum, const, default, examples, extras) still go
// through json.Marshal.
func appendSchema(b []byte, s *jsonschema.Schema) ([]byte, error) {
	switch {
	case s == nil:
		return append(b, "null"...), nil
	case s == jsonschema.TrueSchema:
		return append(b, "true"...), nil
	case s == jsonschema.FalseSchema:
		return append(b, "false"...), nil
	case schemaFieldsZero(s):
		// Empty, or a boolean schema read from JSON: the type's own encoding says
		// which, without encoding/json (it returns before reaching it).
		data, err := s.MarshalJSON()
		return append(b, data...), err
	}
	o := objectWriter{b: append(b, '{')}
	o.str("$schema", s.Version)
	o.str("$id", string(s.ID))
	o.str("$anchor", s.Anchor)
	o.str("$ref", s.Ref)
	o.str("$dynamicRef", s.DynamicRef)
	o.schemaMap("$defs", s.Definitions)
	o.str("$comment", s.Comments)
	o.schemas("allOf", s.AllOf)
	o.schemas("anyOf", s.AnyOf)
	o.schemas("oneOf", s.OneOf)
	o.schema("not", s.Not)
	o.schema("if", s.If)
	o.schema("then", s.Then)
	o.schema("else", s.Else)
	o.schemaMap("dependentSchemas", s.DependentSchemas)
	o.schemas("prefixItems", s.PrefixItems)
	o.schema("items", s.Items)
	o.schema("contains", s.Contains)
	if s.Properties != nil && o.err == nil {
		o.key("properties")
		if s.Properties.Len() == 0 {
			// "{}", or "null" for a map not made by orderedmap.New: its own encoding knows.
			var data []byte
			data, o.err = s.Properties.MarshalJSON()
			o.b = append(o.b, data...)
		} else {
			var names []string // in the map's order
			for p := s.Properties.Oldest(); p != nil; p = p.Next() {
				names = append(names, p.Key)
			}
			o.members(names, func(name string) {
				v, _ := s.Properties.Get(name)
				o.b, o.err = appendSchema(o.b, v)
			})
		}
	}
	o.schemaMap("patternProperties", s.PatternProperties)
	o.schema("additionalProperties", s.AdditionalProperties)
	o.schema("propertyNames", s.PropertyNames)
	o.str("type", s.Type)
	o.values("enum", s.Enum)
	o.value("const", s.Const)
	o.number("multipleOf", s.MultipleOf)
	o.number("maximum", s.Maximum)
	o.number("exclusiveMaximum", s.ExclusiveMaximum)
	o.number("minimum", s.Minimum)
	o.number("exclusiveMinimum", s.ExclusiveMinimum)
	o.count("maxLength", s.MaxLength)
	o.count("minLength", s.MinLength)
	o.str("pattern", s.Pattern)
	o.count("maxItems", s.MaxItems)
	o.count("minItems", s.MinItems)
	o.boolean("uniqueItems", s.UniqueItems)
	o.count("maxContains", s.MaxContains)
	o.count("minContains", s.MinContains)
	o.count("maxProperties", s.MaxProperties)
	o.count("minProperties", s.MinProperties)
	o.strs("required", s.Required)
	if len(s.DependentRequired) > 0 {
		o.key("dependentRequired")
		o.members(sortedKeys(s.DependentRequired), func(name string) {
			o.b = appendStrings(o.b, s.DependentRequired[name])
		})
	}
	o.str("format", s.Format)
	o.str("contentEncoding", s.ContentEncoding)
	o.str("contentMediaType", s.ContentMediaType)
	o.schema("contentSchema", s.ContentSchema)
	o.str("title", s.Title)
	o.str("description", s.Description)
	o.value("default", s.Default)
	o.boolean("deprecated", s.Deprecated)
	o.boolean("readOnly", s.ReadOnly)
	o.boolean("writeOnly", s.WriteOnly)
	o.values("examples", s.Examples)
	// As the type's own encoding: the extras, keys sorted, after the fields.
	for _, k := range sortedKeys(s.Extras) {
		o.marshal(k, s.Extras[k]) // null too, as a map's encoding writes it
	}
	if o.err != nil {
		return nil, o.err
	}
	return append(o.b, '}'), nil
}

// schemaFieldsZero reports whether every field appendSchema writes is empty.
func schemaFieldsZero(s *jsonschema.Schema) bool {
	return s.Version == "" && s.ID == "" && s.Anchor == "" && s.Ref == "" && s.DynamicRef == "" &&
		s.Definitions == nil && s.Comments == "" && s.AllOf == nil && s.AnyOf == nil && s.OneOf == nil &&
		s.Not == nil && s.If == nil && s.Then == nil && s.Else == nil && s.DependentSchemas == nil &&
		s.PrefixItems == nil && s.Items == nil && s.Contains == nil && s.Properties == nil &&
		s.PatternProperties == nil && s.AdditionalProperties == nil && s.PropertyNames == nil &&
		s.Type == "" && s.Enum == nil && s.Const == nil && s.MultipleOf == "" && s.Maximum == "" &&
		s.ExclusiveMaximum == "" && s.Minimum == "" && s.ExclusiveMinimum == "" && s.MaxLength == nil &&
		s.MinLength == nil && s.Pattern == "" && s.MaxItems == nil && s.MinItems == nil && !s.UniqueItems &&
		s.MaxContains == nil && s.MinContains == nil && s.MaxProperties == nil && s.MinProperties == nil &&
		s.Required == nil && s.DependentRequired == nil && s.Format == "" && s.ContentEncoding == "" &&
		s.ContentMediaType == "" && s.ContentSchema == nil && s.Title == "" && s.Description == "" &&
		s.Default == nil && !s.Deprecated && !s.ReadOnly && !s.WriteOnly && s.Examples == nil && s.Extras == nil
}

// objectWriter writes a JSON object's members, leaving out empty ones as the
// fields' omitempty options do; the first error sticks.
type objectWriter struct {
	b   []byte
	n   int // members written
	err error
}

func (o *objectWriter) key(k string) {
	if o.n > 0 {
		o.b = append(o.b, ',')
	}
	o.n++
	o.b = appendString(o.b, k)
	o.b = append(o.b, ':')
}

func (o *objectWriter) str(k, v string) {
	if v != "" {
		o.key(k)
		o.b = appendString(o.b, v)
	}
}

func (o *objectWriter) strs(k string, v []string) {
	if len(v) > 0 {
		o.key(k)
		o.b = appendStrings(o.b, v)
	}
}

func (o *objectWriter) boolean(k string, v bool) {
	if v {
		o.key(k)
		o.b = append(o.b, "true"...)
	}
}

func (o *objectWriter) count(k string, v *uint64) {
	if v != nil {
		o.key(k)
		o.b = strconv.AppendUint(o.b, *v, 10)
	}
}

func (o *objectWriter) number(k string, v json.Number) {
	if v != "" {
		o.value(k, v) // json.Marshal checks it is a number
	}
}

func (o *objectWriter) value(k string, v any) {
	if v != nil {
		o.marshal(k, v)
	}
}

func (o *objectWriter) values(k string, v []any) {
	if len(v) > 0 {
		o.marshal(k, v)
	}
}

// marshal writes member k with json.Marshal's encoding of v.
func (o *objectWriter) marshal(k string, v any) {
	if o.err != nil {
		return
	}
	o.key(k)
	var data []byte
	data, o.err = json.Marshal(v)
	o.b = append(o.b, data...)
}

func (o *objectWriter) schema(k string, v *jsonschema.Schema) {
	if v != nil && o.err == nil {
		o.key(k)
		o.b, o.err = appendSchema(o.b, v)
	}
}

func (o *objectWriter) schemas(k string, v []*jsonschema.Schema) {
	if len(v) == 0 || o.err != nil {
		return
	}
	o.key(k)
	o.b = append(o.b, '[')
	for i, s := range v {
		if i > 0 {
			o.b = append(o.b, ',')
		}
		if o.b, o.err = appendSchema(o.b, s); o.err != nil {
			return
		}
	}
	o.b = append(o.b, ']')
}

func (o *objectWriter) schemaMap(k string, v map[string]*jsonschema.Schema) {
	if len(v) == 0 || o.err != nil {
		return
	}
	o.key(k)
	o.members(sortedKeys(v), func(name string) { o.b, o.err = appendSchema(o.b, v[name]) })
}

// members writes an object whose members are names, in order, each value written
// by value; it stops at the first error.
func (o *objectWriter) members(names []string, value func(name string)) {
	o.b = append(o.b, '{')
	for i, name := range names {
		if o.err != nil {
			return
		}
		if i > 0 {
			o.b = append(o.b, ',')
		}
		o.b = appendString(o.b, name)
		o.b = append(o.b, ':')
		value(name)
	}
	o.b = append(o.b, '}')
}

func appendStrings(b []byte, v []string) []byte {
	if v == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, s := range v {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, s)
	}
	return append(b, ']')
}

// appendString appends s as encoding/json encodes a string (HTML characters
// escaped); encoding/json's string encoder costs nothing to build.
func appendString(b []byte, s string) []byte {
	data, _ := json.Marshal(s) // a string always encodes
	return append(b, data...)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// selfContain makes the schema of a type that refers back to itself (directly, as
// a Node with []Node children, or through another type) self-contained. Reflected
// with ExpandedStruct, the type's own schema is written at the root, where the
// references to it ("#/$defs/Node") do not reach; so a copy of the root's schema
// is added to "$defs" under the name they use. The root stays an object schema, as
// providers require of a tool's input.
func selfContain(s *jsonschema.Schema) {
	var missing []string
	seen := map[*jsonschema.Schema]bool{}
	var walk func(x *jsonschema.Schema)
	walk = func(x *jsonschema.Schema) {
		if x == nil || seen[x] {
			return
		}
		seen[x] = true
		if name, ok := strings.CutPrefix(x.Ref, "#/$defs/"); ok && s.Definitions[name] == nil && !slices.Contains(missing, name) {
			missing = append(missing, name)
		}
		eachSubschema(x, walk)
	}
	walk(s)
	// Only the root's own definition can be missing: every other named type is in
	// $defs. More than one name missing is left for the registry to refuse.
	if len(missing) != 1 {
		return
	}
	root := *s
	root.Version, root.ID, root.Definitions = "", "", nil
	if s.Definitions == nil {
		s.Definitions = jsonschema.Definitions{}
	}
	s.Definitions[missing[0]] = &root
}

// eachSubschema calls f with every schema x holds directly.
func eachSubschema(x *jsonschema.Schema, f func(*jsonschema.Schema)) {
	for _, k := range sortedKeys(x.Definitions) {
		f(x.Definitions[k])
	}
	for _, list := range [][]*jsonschema.Schema{x.AllOf, x.AnyOf, x.OneOf, x.PrefixItems} {
		for _, y := range list {
			f(y)
		}
	}
	for _, y := range []*jsonschema.Schema{x.Not, x.If, x.Then, x.Else, x.Items, x.Contains,
		x.AdditionalProperties, x.PropertyNames, x.ContentSchema} {
		f(y)
	}
	for _, m := range []map[string]*jsonschema.Schema{x.DependentSchemas, x.PatternProperties} {
		for _, k := range sortedKeys(m) {
			f(m[k])
		}
	}
	if x.Properties != nil {
		for p := x.Properties.Oldest(); p != nil; p = p.Next() {
			f(p.Value)
		}
	}
}
