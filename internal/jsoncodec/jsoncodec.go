// Package jsoncodec is the JSON codec of the call path: the registry's validation
// decode, the sdk's typed tools and projections, the serve API's settlements. It
// decodes with encoding/json's semantics and encodes with those of an encoding/json
// Encoder that does not escape HTML (both checked by differential fuzz tests against
// the standard library), at github.com/segmentio/encoding/json's speed: decoding a
// 64 KiB string is about 20× faster than encoding/json, which matters because every
// call's input and output is decoded on both sides of the plugin boundary.
//
// segmentio's decoder recurses per nesting level without a limit of its own, so
// Unmarshal refuses documents nested deeper than encoding/json allows (10000 levels)
// before decoding: JSON from a plugin or a runner cannot exhaust the stack.
package jsoncodec

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/segmentio/encoding/json"
)

// MaxDepth is the deepest nesting of arrays and objects Unmarshal accepts, the same
// limit encoding/json's scanner enforces.
const MaxDepth = 10000

// Unmarshal decodes data into v like encoding/json.Unmarshal.
func Unmarshal(data []byte, v any) error {
	if err := checkDepth(data); err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}

// UnmarshalNoCopy is Unmarshal, except that decoded strings needing no unescaping
// share data's memory instead of copying it (segmentio's ZeroCopy): decoding a
// 64 KiB string costs no allocation. data must not be modified while v, or any string
// taken from it, is in use.
func UnmarshalNoCopy(data []byte, v any) error {
	if err := checkDepth(data); err != nil {
		return err
	}
	rest, err := json.Parse(data, v, json.ZeroCopy)
	if len(rest) != 0 && err == nil {
		// As Unmarshal does: trailing bytes are an error, like encoding/json's.
		err = fmt.Errorf("json: invalid character %q after top-level value", rest[0])
	}
	return err
}

// Marshal encodes v like encoding/json.Marshal (map keys sorted) with HTML escaping
// off, as an encoding/json Encoder with SetEscapeHTML(false) does: what it encodes
// is tool output on its way to a model, not into an HTML page, so "<" stays one
// character instead of six, and a string is scanned for three fewer characters. A
// json.RawMessage (checked to be valid) is copied as it is, insignificant space
// included, where encoding/json would compact it.
func Marshal(v any) ([]byte, error) {
	if s, ok := v.(string); ok {
		return marshalString(s)
	}
	buf := marshalBuffers.Get().(*[]byte)
	data, err := json.Append((*buf)[:0], v, json.SortMapKeys)
	if err != nil {
		return nil, err
	}
	out := bytes.Clone(data)
	if cap(data) <= maxPooledBuffer {
		*buf = data
		marshalBuffers.Put(buf)
	}
	return out, nil
}

// marshalString is Marshal of a string, the commonest tool output: its encoding is
// at least as long as the string, so it goes straight into a buffer of about that
// size, where the scratch buffer cost a second copy of the whole output (the clone):
// for a 64 KiB output, a copy and a 64 KiB allocation in every call of a plugin's
// text tool. A string whose escapes overflow the room left for them gets an exact
// copy, so no output keeps much more memory than it needs.
func marshalString(s string) ([]byte, error) {
	room := len(s) + len(s)/16 + 16
	data, err := json.Append(make([]byte, 0, room), s, json.SortMapKeys)
	if err != nil {
		return nil, err
	}
	if cap(data) > room {
		return bytes.Clone(data), nil
	}
	return data, nil
}

// marshalBuffers holds Marshal's scratch buffers: encoding appends, so one that has
// grown to an output's size encodes the next output of that size without regrowing.
var marshalBuffers = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledBuffer keeps one huge output from pinning its buffer in the pool.
const maxPooledBuffer = 1 << 20

// checkDepth refuses data nested deeper than MaxDepth. Documents with fewer opening
// brackets than that cannot be, and are passed after a vectorized count.
func checkDepth(data []byte) error {
	if bytes.Count(data, []byte{'{'})+bytes.Count(data, []byte{'['}) <= MaxDepth {
		return nil
	}
	depth, inString, escaped := 0, false, false
	for i, c := range data {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			if depth++; depth > MaxDepth {
				return fmt.Errorf("json: nesting exceeds %d levels at offset %d", MaxDepth, i)
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return nil
}
