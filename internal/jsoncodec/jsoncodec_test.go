package jsoncodec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

var seeds = []string{
	`{"text":"hello"}`, `{"a":[1,2.5,-3e2,true,false,null],"b":{"c":"d"}}`, `"\u00e9\ud83d\ude00"`,
	`"\xff\xfe"`, `{"a":1,"a":2}`, `1e400`, `[1,]`, `{"a":1} x`, ` [] `, `-0`, `"\u0000"`,
	`{"<&>":"<&>"}`, `"\ud800"`, `123456789012345678901234567890`, `{"A":1,"a":2}`, ``,
}

// FuzzAgreesWithEncodingJSON checks that decoding into any, the registry's
// validation decode, agrees with encoding/json on every input: the same documents
// are accepted, to the same values.
func FuzzAgreesWithEncodingJSON(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var want, got, shared any
		werr := json.Unmarshal(data, &want)
		gerr := Unmarshal(data, &got)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("%q: encoding/json error %v, jsoncodec error %v", data, werr, gerr)
		}
		if werr == nil && !reflect.DeepEqual(want, got) {
			t.Fatalf("%q: encoding/json %#v, jsoncodec %#v", data, want, got)
		}
		serr := UnmarshalNoCopy(data, &shared)
		if (werr == nil) != (serr == nil) {
			t.Fatalf("%q: encoding/json error %v, UnmarshalNoCopy error %v", data, werr, serr)
		}
		if werr == nil && !reflect.DeepEqual(want, shared) {
			t.Fatalf("%q: encoding/json %#v, UnmarshalNoCopy %#v", data, want, shared)
		}
		if werr == nil {
			reencodesAlike(t, want, got)
		}
	})
}

// reencodesAlike checks that Marshal(got) encodes what encoding/json encodes of
// want, a value decoded from the same document.
func reencodesAlike(t *testing.T, want, got any) {
	t.Helper()
	wout, werr := stdMarshal(want)
	gout, gerr := Marshal(got)
	if werr != nil || gerr != nil || string(wout) != string(compact(gout)) {
		t.Fatalf("re-encoding %#v: encoding/json %s (%v), jsoncodec %s (%v)", want, wout, werr, gout, gerr)
	}
}

// stdMarshal is what Marshal must agree with: encoding/json without HTML escaping.
// Marshal keeps a json.RawMessage's insignificant space where encoding/json removes
// it, so both encodings are compared compacted.
func stdMarshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return compact(b.Bytes()), nil
}

func compact(data []byte) []byte {
	var b bytes.Buffer
	if err := json.Compact(&b, data); err != nil {
		return data
	}
	return b.Bytes()
}

type typed struct {
	Text   string            `json:"text"`
	N      int               `json:"n,omitempty"`
	F      float64           `json:"f"`
	Tags   []string          `json:"tags"`
	Meta   map[string]string `json:"meta,omitempty"`
	Nested *typed            `json:"nested,omitempty"`
	Raw    json.RawMessage   `json:"raw,omitempty"`
	Quoted int64             `json:"quoted,string,omitempty"`
}

// FuzzTypedAgreesWithEncodingJSON does the same for decoding into a struct and
// encoding it again, the sdk's typed tool path.
func FuzzTypedAgreesWithEncodingJSON(f *testing.F) {
	for _, s := range append(seeds, `{"text":"x","n":3,"f":1.5,"tags":["a"],"meta":{"k":"v"},"nested":{"text":"y"},"raw":[1, 2],"quoted":"7"}`, `{"TEXT":"case"}`, `{"n":1.5}`) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var want, got typed
		werr := json.Unmarshal(data, &want)
		gerr := Unmarshal(data, &got)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("%q: encoding/json error %v, jsoncodec error %v", data, werr, gerr)
		}
		if werr == nil {
			reencodesAlike(t, want, got)
		}
	})
}

func TestDepthLimit(t *testing.T) {
	for _, tc := range []struct {
		depth int
		ok    bool
	}{{MaxDepth, true}, {MaxDepth + 1, false}, {1 << 20, false}} {
		doc := strings.Repeat("[", tc.depth) + strings.Repeat("]", tc.depth)
		var v any
		err := Unmarshal([]byte(doc), &v)
		if (err == nil) != tc.ok {
			t.Errorf("depth %d: err = %v, want ok = %v", tc.depth, err, tc.ok)
		}
		if err := UnmarshalNoCopy([]byte(doc), &v); (err == nil) != tc.ok {
			t.Errorf("depth %d: UnmarshalNoCopy err = %v, want ok = %v", tc.depth, err, tc.ok)
		}
		if stdErr := json.Unmarshal([]byte(doc), &v); (stdErr == nil) != tc.ok {
			t.Errorf("depth %d: encoding/json err = %v, want ok = %v", tc.depth, stdErr, tc.ok)
		}
	}
	// Brackets inside strings do not count.
	doc := `["` + strings.Repeat("[", 2*MaxDepth) + `"]`
	var v any
	if err := Unmarshal([]byte(doc), &v); err != nil {
		t.Errorf("brackets in a string: %v", err)
	}
}

// Errors quote at most a short prefix of the input: they reach the model as
// validation problems, so a megabyte of bad input must not come back in them.
func TestErrorsStayShort(t *testing.T) {
	big := strings.Repeat("a", 1<<20)
	for _, doc := range []string{`{"text": ` + big + `}`, `["` + big, `{"text":"x"} ` + big} {
		var v any
		err := Unmarshal([]byte(doc), &v)
		if err == nil || len(err.Error()) > 200 {
			t.Errorf("error for %d bytes of bad JSON: %d bytes: %.300v", len(doc), len(fmt.Sprint(err)), err)
		}
	}
}

// TestMarshalString holds Marshal's string path to encoding/json, in room and
// overflowing it with escapes, and checks that an overflow keeps no slack.
func TestMarshalString(t *testing.T) {
	for _, s := range []string{"", "plain", strings.Repeat("a", 64<<10), "<b>&</b>", strings.Repeat("\"\n\x01", 1000), "bad \xff utf-8 \u2028"} {
		want, _ := stdMarshal(s)
		got, err := Marshal(s)
		if err != nil || string(got) != string(want) {
			t.Fatalf("Marshal(%.40q) = %.60s, %v; want %.60s", s, got, err, want)
		}
		if cap(got) > len(got)+len(got)/16+16 {
			t.Fatalf("Marshal(%.40q): capacity %d for %d bytes", s, cap(got), len(got))
		}
	}
}
