package registry

import (
	"bytes"
	"math"
	"math/bits"
)

// shapeCheck returns a check that gives the validator's verdict, without the
// validator, for a schema of the subset that typed tools derive from Go types:
// true, and objects whose keywords are only
//
//   - "type", one of string, boolean, null, number, integer, array, object;
//   - for objects, "properties", "required" and "additionalProperties" (a
//     boolean or a schema); for arrays, "items"; every subschema in the subset;
//   - annotations, which never change a verdict (title, description, default,
//     examples, deprecated, readOnly, writeOnly, $comment).
//
// For any other schema it returns nil: "$ref", "enum", "format", string lengths
// and every other keyword are the validator's. The check takes the value as
// jsoncodec decodes it (objects map[string]any, arrays []any, numbers float64).
// FuzzShapeCheckAgreesWithValidator holds the two to the same verdicts.
func shapeCheck(schema any) func(any) bool { return shapeAt(schema, 0) }

// maxShapeDepth bounds the subschemas shapeCheck follows; deeper schemas are the
// validator's.
const maxShapeDepth = 16

var annotations = map[string]bool{
	"title": true, "description": true, "default": true, "examples": true,
	"deprecated": true, "readOnly": true, "writeOnly": true, "$comment": true,
}

func shapeAt(schema any, depth int) func(any) bool {
	if b, ok := schema.(bool); ok {
		if b {
			return acceptsAll
		}
		return nil
	}
	s, ok := schema.(map[string]any)
	if !ok || depth > maxShapeDepth {
		return nil
	}
	typ := ""
	for k, v := range s {
		switch {
		case k == "type":
			if typ, ok = v.(string); !ok {
				return nil
			}
		case annotations[k]:
		case k == "properties", k == "required", k == "additionalProperties":
			if s["type"] != "object" {
				return nil
			}
		case k == "items":
			if s["type"] != "array" {
				return nil
			}
		default:
			return nil
		}
	}
	switch typ {
	case "":
		return acceptsAll
	case "string":
		return isString
	case "boolean":
		return isBool
	case "null":
		return isNull
	case "number":
		return isNumber
	case "integer":
		return isInteger
	case "array":
		return arrayShape(s, depth)
	case "object":
		return objectShape(s, depth)
	}
	return nil
}

func arrayShape(s map[string]any, depth int) func(any) bool {
	item := acceptsAll
	if schema, ok := s["items"]; ok {
		if item = shapeAt(schema, depth+1); item == nil {
			return nil
		}
	}
	return func(v any) bool {
		a, ok := v.([]any)
		if !ok {
			return false
		}
		for _, e := range a {
			if !item(e) {
				return false
			}
		}
		return true
	}
}

func objectShape(s map[string]any, depth int) func(any) bool {
	props := map[string]func(any) bool{}
	if p, ok := s["properties"]; ok {
		m, ok := p.(map[string]any)
		if !ok {
			return nil
		}
		for name, schema := range m {
			if props[name] = shapeAt(schema, depth+1); props[name] == nil {
				return nil
			}
		}
	}
	var required []string
	if r, ok := s["required"]; ok {
		list, ok := r.([]any)
		if !ok {
			return nil
		}
		for _, name := range list {
			n, ok := name.(string)
			if !ok {
				return nil
			}
			required = append(required, n)
		}
	}
	additional := acceptsAll // absent: anything else is allowed
	if a, ok := s["additionalProperties"]; ok {
		if a == false {
			additional = nil // nothing else is allowed
		} else if additional = shapeAt(a, depth+1); additional == nil {
			return nil
		}
	}
	return func(v any) bool {
		obj, ok := v.(map[string]any)
		if !ok {
			return false
		}
		for _, name := range required {
			if _, ok := obj[name]; !ok {
				return false
			}
		}
		for name, val := range obj {
			check, ok := props[name]
			if !ok {
				check = additional
			}
			if check == nil || !check(val) {
				return false
			}
		}
		return true
	}
}

func acceptsAll(any) bool { return true }

func isString(v any) bool { _, ok := v.(string); return ok }

func isBool(v any) bool { _, ok := v.(bool); return ok }

func isNull(v any) bool { return v == nil }

func isNumber(v any) bool {
	f, ok := v.(float64)
	return ok && !math.IsInf(f, 0) && !math.IsNaN(f)
}

// isInteger is the validator's "integer": a finite number with no fractional part
// (so 1.0 is one).
func isInteger(v any) bool {
	f, ok := v.(float64)
	return ok && !math.IsInf(f, 0) && f == math.Trunc(f)
}

// textShape is shapeCheck's subset checked on JSON text without decoding it
// (checkText): for a call's input, whose decoded value nothing needs once it is
// valid, the decode into maps and interfaces was most of the validation's
// allocations. It is conservative: it accepts only well-formed JSON whose decoded
// value shapeCheck would accept, and says no to anything it is unsure of (escaped
// or non-ASCII keys, exponents, deep nesting), which then takes the full path.
// FuzzCheckTextImpliesValid holds it to that.
type textShape struct {
	kind       byte                // 0 (anything), 's', 'b', 'n' (null), 'f' (number), 'i' (integer), 'a', 'o'
	items      *textShape          // arrays: nil, anything
	props      map[string]textProp // objects
	additional *textShape          // objects: for other names; nil, anything
	closed     bool                // objects: no other names (additionalProperties false)
	required   uint64              // objects: the bits of the required properties
}

type textProp struct {
	shape *textShape // nil: anything
	bit   uint64     // its bit in required, 0 if not required
}

var anyText = &textShape{}

// textShapeAt mirrors shapeAt; nil where shapeAt gives nil, or where the text check
// cannot follow (more than 64 required names).
func textShapeAt(schema any, depth int) *textShape {
	if b, ok := schema.(bool); ok {
		if b {
			return anyText
		}
		return nil
	}
	s, ok := schema.(map[string]any)
	if !ok || depth > maxShapeDepth || shapeAt(schema, depth) == nil {
		return nil
	}
	typ, _ := s["type"].(string)
	switch typ {
	case "":
		return anyText
	case "string":
		return &textShape{kind: 's'}
	case "boolean":
		return &textShape{kind: 'b'}
	case "null":
		return &textShape{kind: 'n'}
	case "number":
		return &textShape{kind: 'f'}
	case "integer":
		return &textShape{kind: 'i'}
	case "array":
		t := &textShape{kind: 'a', items: anyText}
		if items, ok := s["items"]; ok {
			if t.items = textShapeAt(items, depth+1); t.items == nil {
				return nil
			}
		}
		return t
	case "object":
		t := &textShape{kind: 'o', props: map[string]textProp{}, additional: anyText}
		if p, ok := s["properties"].(map[string]any); ok {
			for name, schema := range p {
				sub := textShapeAt(schema, depth+1)
				if sub == nil {
					return nil
				}
				t.props[name] = textProp{shape: sub}
			}
		}
		if a, ok := s["additionalProperties"]; ok {
			if a == false {
				t.closed, t.additional = true, nil
			} else if t.additional = textShapeAt(a, depth+1); t.additional == nil {
				return nil
			}
		}
		if r, ok := s["required"].([]any); ok {
			for _, name := range r {
				n := name.(string) // shapeAt accepted the schema: strings only
				p, ok := t.props[n]
				if !ok {
					// Checked as another name is; closed, it can never be there.
					if t.closed {
						return nil
					}
					p.shape = t.additional
				}
				if p.bit == 0 {
					if bits.OnesCount64(t.required) == 64 {
						return nil
					}
					p.bit = 1 << bits.OnesCount64(t.required)
					t.required |= p.bit
				}
				t.props[n] = p
			}
		}
		return t
	}
	return nil
}

// maxTextDepth bounds the nesting checkText follows; deeper text takes the full path.
const maxTextDepth = 32

// checkText reports whether data is one JSON value, with nothing but white space
// around it, whose decoded value t accepts. False means "not sure", not "invalid".
func (t *textShape) checkText(data []byte) bool {
	s := textScanner{data: data}
	s.space()
	if !s.value(t, 0) {
		return false
	}
	s.space()
	return s.i == len(s.data)
}

type textScanner struct {
	data []byte
	i    int
}

func (s *textScanner) space() {
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// value consumes one value that t (nil: anything) accepts.
func (s *textScanner) value(t *textShape, depth int) bool {
	if s.i >= len(s.data) || depth > maxTextDepth {
		return false
	}
	if t == nil {
		t = anyText
	}
	switch c := s.data[s.i]; {
	case c == '"':
		return (t.kind == 0 || t.kind == 's') && s.str(false)
	case c == '{':
		return (t.kind == 0 || t.kind == 'o') && s.object(t, depth)
	case c == '[':
		return (t.kind == 0 || t.kind == 'a') && s.array(t, depth)
	case c == 't':
		return (t.kind == 0 || t.kind == 'b') && s.literal("true")
	case c == 'f':
		return (t.kind == 0 || t.kind == 'b') && s.literal("false")
	case c == 'n':
		return (t.kind == 0 || t.kind == 'n') && s.literal("null")
	case c == '-' || c >= '0' && c <= '9':
		return (t.kind == 0 || t.kind == 'f' || t.kind == 'i') && s.number(t.kind == 'i')
	}
	return false
}

func (s *textScanner) literal(word string) bool {
	if !bytes.HasPrefix(s.data[s.i:], []byte(word)) {
		return false
	}
	s.i += len(word)
	return true
}

// str consumes a string; a key (asKey) only of printable ASCII without escapes,
// so that its bytes are the decoded name.
func (s *textScanner) str(asKey bool) bool {
	s.i++ // the opening quote
	for s.i < len(s.data) {
		c := s.data[s.i]
		switch {
		case c == '"':
			s.i++
			return true
		case c < 0x20, asKey && (c == '\\' || c >= 0x80):
			return false
		case c == '\\':
			if s.i+1 >= len(s.data) {
				return false
			}
			switch s.data[s.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i += 2
			case 'u':
				if s.i+6 > len(s.data) {
					return false
				}
				for _, h := range s.data[s.i+2 : s.i+6] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return false
					}
				}
				s.i += 6
			default:
				return false
			}
		default:
			s.i++
		}
	}
	return false
}

// number consumes a number without an exponent and of at most 300 characters
// (finite as a float64); with integer, without a fraction either.
func (s *textScanner) number(integer bool) bool {
	start := s.i
	if s.data[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.data) && s.data[s.i] == '0':
		s.i++
	case s.digits() == 0:
		return false
	}
	if s.i < len(s.data) && s.data[s.i] == '.' {
		s.i++
		if integer || s.digits() == 0 {
			return false
		}
	}
	if s.i < len(s.data) && (s.data[s.i] == 'e' || s.data[s.i] == 'E') {
		return false
	}
	return s.i-start <= 300
}

func (s *textScanner) digits() int {
	start := s.i
	for s.i < len(s.data) && s.data[s.i] >= '0' && s.data[s.i] <= '9' {
		s.i++
	}
	return s.i - start
}

func (s *textScanner) array(t *textShape, depth int) bool {
	s.i++
	s.space()
	if s.i < len(s.data) && s.data[s.i] == ']' {
		s.i++
		return true
	}
	for {
		if !s.value(t.items, depth+1) {
			return false
		}
		if more, ok := s.separator(']'); !ok || !more {
			return ok
		}
	}
}

// separator reads what follows an element or a member: a comma, when more follow,
// or the closing byte; anything else is not ok.
func (s *textScanner) separator(closing byte) (more, ok bool) {
	s.space()
	if s.i >= len(s.data) {
		return false, false
	}
	switch s.data[s.i] {
	case ',':
		s.i++
		s.space()
		return true, true
	case closing:
		s.i++
		return false, true
	}
	return false, false
}

func (s *textScanner) object(t *textShape, depth int) bool {
	s.i++
	s.space()
	var seen uint64
	if s.i < len(s.data) && s.data[s.i] == '}' {
		s.i++
		return seen == t.required
	}
	for {
		if s.i >= len(s.data) || s.data[s.i] != '"' {
			return false
		}
		start := s.i + 1
		if !s.str(true) {
			return false
		}
		name := s.data[start : s.i-1]
		s.space()
		if s.i >= len(s.data) || s.data[s.i] != ':' {
			return false
		}
		s.i++
		s.space()
		var sub *textShape
		if p, ok := t.props[string(name)]; ok {
			sub, seen = p.shape, seen|p.bit
		} else if t.closed {
			return false
		} else {
			sub = t.additional
		}
		if t.kind == 0 {
			sub = anyText // an object where anything goes: its members too
		}
		if !s.value(sub, depth+1) {
			return false
		}
		if more, ok := s.separator('}'); !ok || !more {
			return ok && seen == t.required
		}
	}
}
