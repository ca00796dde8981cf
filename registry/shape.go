package registry

import "math"

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
