package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/toolhost/toolhost/internal/jsoncodec"
)

var messagePrinter = message.NewPrinter(language.English)

// Schemas come from plugins and servers that are not trusted to be small, and the
// compiler's work grows faster than a schema's size: with the number of its
// subschemas squared (it finds each in a list), and more than linearly with their
// depth. So the text of every schema is measured before it is decoded or compiled,
// in one pass that allocates nothing, and refused past these limits:
const (
	// MaxSchemaBytes bounds one schema document's text.
	MaxSchemaBytes = 1 << 20
	// MaxSchemaDepth bounds how deep objects and arrays nest in one schema: the
	// compiler's cost grows faster than the depth, so a deep schema well inside
	// MaxSchemaBytes could otherwise keep the host compiling for minutes.
	MaxSchemaDepth = 64
	// MaxSchemaNodes bounds the subschemas of one schema: its objects and booleans,
	// the values that can be schemas.
	MaxSchemaNodes = 2048
	// MaxBatchSchemaNodes bounds the subschemas of all the schemas of one batch,
	// which are compiled one after another: at most a couple of seconds of CPU.
	MaxBatchSchemaNodes = 64 << 10
)

// ErrSchemaTooComplex is matched (errors.Is) by the error for a schema over
// MaxSchemaBytes, MaxSchemaDepth or MaxSchemaNodes, and for a batch over
// MaxBatchSchemaNodes.
var ErrSchemaTooComplex = errors.New("registry: schema too complex")

// complexityError is a schema or batch over a limit; it says which, and is
// ErrSchemaTooComplex.
type complexityError struct{ msg string }

func (e *complexityError) Error() string        { return e.msg }
func (e *complexityError) Is(target error) bool { return target == ErrSchemaTooComplex }

func tooComplex(format string, args ...any) error {
	return &complexityError{msg: fmt.Sprintf(format, args...)}
}

// measureSchema returns the number of subschemas in raw's text (see
// MaxSchemaNodes), or an error that is ErrSchemaTooComplex as soon as raw is over a
// limit. It reads raw once and allocates nothing. Text that is not JSON is measured
// as far as it goes; decoding it reports what is wrong.
func measureSchema(what string, raw []byte) (nodes int, err error) {
	if len(raw) > MaxSchemaBytes {
		return 0, tooComplex("%s: %d bytes, over the limit of %d", what, len(raw), MaxSchemaBytes)
	}
	depth := 0
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; c {
		case '"':
			for i++; i < len(raw) && raw[i] != '"'; i++ {
				if raw[i] == '\\' {
					i++
				}
			}
		case '{', '[':
			if depth++; depth > MaxSchemaDepth {
				return 0, tooComplex("%s: objects and arrays nest more than %d deep, the limit", what, MaxSchemaDepth)
			}
			if c == '[' {
				continue
			}
			fallthrough
		case 't', 'f': // true, false (the letters of neither include t or f again)
			if nodes++; nodes > MaxSchemaNodes {
				return 0, tooComplex("%s: more than %d subschemas (objects and booleans), the limit", what, MaxSchemaNodes)
			}
		case '}', ']':
			depth--
		}
	}
	return nodes, nil
}

// measureBatch measures every schema of b's tools (authored names, sorted) before
// any is compiled, and refuses the batch when a schema or all of them together are
// over the limits, or when it has more tools than its source may hold at all.
func measureBatch(b Batch, authored []string) error {
	if lim := b.Limits.withDefaults(); b.Location != Application && len(authored) > lim.MaxTools {
		return &RegistrationError{Source: b.Source.String(), Err: &LimitError{Limit: "max_tools", Value: int64(len(authored)), Max: int64(lim.MaxTools)}}
	}
	total := 0
	for _, a := range authored {
		t := b.Tools[a]
		for _, s := range []struct {
			what string
			raw  json.RawMessage
		}{{"input schema", t.InputSchema}, {"output schema", t.OutputSchema}, {"structured schema", t.StructuredSchema}} {
			n, err := measureSchema(s.what, s.raw)
			if err != nil {
				return &RegistrationError{Tool: a, Source: b.Source.String(), Err: err}
			}
			if total += n; total > MaxBatchSchemaNodes {
				return &RegistrationError{Source: b.Source.String(), Err: tooComplex("its schemas have more than %d subschemas (objects and booleans) together, the limit", MaxBatchSchemaNodes)}
			}
		}
	}
	return nil
}

// SchemaCost is what compiling one schema costs, measured without compiling it.
type SchemaCost struct {
	// Nodes is the number of its subschemas as written (see MaxSchemaNodes).
	Nodes int
	// Unfolded is the number with every local "$ref" replaced by its target (see
	// MaxUnfoldedSubschemas).
	Unfolded int
}

// MeasureSchema measures raw as registering it would before compiling it, for a
// source that registers its tools in several batches and bounds them together
// (package mcp bounds a server's whole listing by MaxBatchSchemaNodes). It
// returns an error, ErrSchemaTooComplex for one past a limit, for a schema
// registering would refuse; what names the schema in it ("input schema").
func MeasureSchema(what string, raw json.RawMessage) (SchemaCost, error) {
	nodes, err := measureSchema(what, raw)
	if err != nil {
		return SchemaCost{}, err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return SchemaCost{}, fmt.Errorf("%s: not JSON: %w", what, err)
	}
	cost, err := measureValidation(what, doc)
	if err != nil {
		return SchemaCost{}, err
	}
	return SchemaCost{Nodes: nodes, Unfolded: cost.unfolded}, nil
}

// refuseLoader refuses every URL that is not already in the compiler, so a schema can
// never reach the network or the file system through "$ref".
type refuseLoader struct{}

func (refuseLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("loading %q refused: schemas must be self-contained", url)
}

// compiledSchema is one compiled JSON Schema with its canonical encoding.
type compiledSchema struct {
	schema    *jsonschema.Schema
	canonical json.RawMessage // keys sorted, no insignificant space: byte-stable
	keys      []string        // top-level "properties" names, sorted, for error messages
	// quick gives the validator's verdict without it for the schemas typed tools
	// derive from Go types (see shapeCheck), nil for others. It is asked first; the
	// validator still runs for values it refuses, so problems read the same. The
	// validator copies every string it checks: for a 64 KiB input that copy and its
	// walk were a third of the validation.
	quick func(v any) bool
	// text decides the same subset on the JSON text, without decoding it (see
	// textShape), nil for other schemas; validText asks it first for inputs.
	text *textShape
	// cost is what validating against the schema costs (validateWithin).
	cost validationCost
}

// maxTextCheck is the longest input validText checks on its text: the check walks
// strings a byte at a time, where the decoder skims them a word at a time, so past
// a few KiB the decode is the faster way.
const maxTextCheck = 4 << 10

// validText reports whether data is valid against s by its text alone (no
// decode, no allocation). False means "not sure": validate decides.
func (s *compiledSchema) validText(data []byte) bool {
	return s != nil && s.text != nil && len(data) <= maxTextCheck && s.text.checkText(data)
}

// schemaCache shares compiled schemas among a registry's registrations of the same
// bytes: a plugin registers the same schemas at every start, restart and reload, and
// many tools share one (the output schema of every text tool). Compiling is most of
// what registering a tool costs. Only compiled schemas are
// kept, never errors; when it holds maxCachedSchemas schemas or
// maxCachedSchemaBytes of their text, it starts over, so schemas from plugins cannot
// grow it without bound (a small compiled schema takes about 4 KB).
type schemaCache struct {
	mu    sync.Mutex
	byRaw map[string]*compiledSchema
	bytes int
}

const (
	maxCachedSchemas     = 512
	maxCachedSchemaBytes = 1 << 20
)

// compile returns the compiled schema for raw, from the cache or compileSchema.
func (c *schemaCache) compile(what string, raw json.RawMessage) (*compiledSchema, error) {
	c.mu.Lock()
	cs, ok := c.byRaw[string(raw)]
	c.mu.Unlock()
	if ok {
		return cs, nil
	}
	cs, err := compileSchema(what, raw)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.byRaw) >= maxCachedSchemas || c.bytes+len(raw) > maxCachedSchemaBytes {
		c.byRaw, c.bytes = nil, 0
	}
	if c.byRaw == nil {
		c.byRaw = map[string]*compiledSchema{}
	}
	if _, ok := c.byRaw[string(raw)]; !ok {
		c.byRaw[string(raw)] = cs
		c.bytes += len(raw)
	}
	return cs, nil
}

// compileSchema compiles raw as a self-contained draft 2020-12 schema (the default
// when it names no "$schema"). what names the schema in errors ("input schema").
func compileSchema(what string, raw json.RawMessage) (*compiledSchema, error) {
	if _, err := measureSchema(what, raw); err != nil {
		return nil, err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%s: not JSON: %w", what, err)
	}
	switch doc.(type) {
	case map[string]any, bool:
	default:
		return nil, fmt.Errorf("%s: must be a JSON object or boolean", what)
	}
	cost, err := measureValidation(what, doc)
	if err != nil {
		return nil, err
	}
	const loc = "toolhost:///schema.json"
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(refuseLoader{})
	if err := c.AddResource(loc, doc); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	s, err := c.Compile(loc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	canonical, err := json.Marshal(doc) // encoding/json sorts map keys
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	cs := &compiledSchema{schema: s, canonical: canonical, quick: shapeCheck(doc), text: textShapeAt(doc, 0), cost: cost}
	if obj, ok := doc.(map[string]any); ok {
		if props, ok := obj["properties"].(map[string]any); ok {
			for k := range props {
				cs.keys = append(cs.keys, k)
			}
			sort.Strings(cs.keys)
		}
	}
	return cs, nil
}

// Problem is one reason a value failed validation.
type Problem struct {
	// Pointer is the JSON pointer of the offending value ("" for the whole document).
	Pointer string `json:"pointer"`
	// Message says what was wrong there.
	Message string `json:"message"`
}

func (p Problem) String() string {
	ptr := p.Pointer
	if ptr == "" {
		ptr = "/"
	}
	return ptr + ": " + p.Message
}

// validate decodes data and checks it against s (nil: any JSON). It returns the
// decoded value and the problems found; a decode failure is one problem at "".
// Numbers decode as float64, which the validator handles; integers beyond 2^53 lose
// precision in range checks only.
func (s *compiledSchema) validate(data []byte) (any, []Problem) {
	var v any
	// No copy: data is the call's input or output, which nothing modifies while the
	// decoded value (or the text part taken from it) is in use.
	if err := jsoncodec.UnmarshalNoCopy(data, &v); err != nil {
		return nil, []Problem{{Message: "not valid JSON: " + err.Error()}}
	}
	if s == nil || (s.quick != nil && s.quick(v)) {
		return v, nil
	}
	err := s.schema.Validate(v)
	if err == nil {
		return v, nil
	}
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		return v, []Problem{{Message: err.Error()}}
	}
	var problems []Problem
	collectProblems(verr, &problems)
	return v, problems
}

// collectProblems flattens a validation error tree to its leaves.
func collectProblems(e *jsonschema.ValidationError, out *[]Problem) {
	if len(e.Causes) == 0 {
		*out = append(*out, Problem{Pointer: jsonPointer(e.InstanceLocation), Message: e.ErrorKind.LocalizedString(messagePrinter)})
		return
	}
	for _, c := range e.Causes {
		collectProblems(c, out)
	}
}

func jsonPointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(strings.ReplaceAll(strings.ReplaceAll(t, "~", "~0"), "/", "~1"))
	}
	return b.String()
}
