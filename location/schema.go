package location

// The config document's schema: the embedded config.schema.json, compiled once,
// and its validation errors turned into ConfigProblems a person can read.

import (
	"bytes"
	_ "embed"
	"fmt"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

//go:embed config.schema.json
var configSchema []byte

// configSchemaURL is the schema's $id; the compiler knows it only as an
// embedded resource and never fetches it.
const configSchemaURL = "https://github.com/toolhost/toolhost/location/config.schema.json"

// ConfigSchema returns the published JSON Schema (draft 2020-12) of the config
// document. The result is a fresh copy the caller may modify.
func ConfigSchema() []byte {
	return bytes.Clone(configSchema)
}

// compiledSchema compiles the embedded schema once. A failure is a defect of
// the build, never of the input, so it panics.
var compiledSchema = sync.OnceValue(func() *jsonschema.Schema {
	sch, err := compileSchema(configSchemaURL, configSchema)
	if err != nil {
		panic(fmt.Sprintf("location: embedded config schema: %v", err))
	}
	return sch
})

// compileSchema compiles a self-contained draft 2020-12 schema. The compiler
// has no loader for any URL scheme, so a $ref outside the document fails
// instead of reaching the network or the file system.
func compileSchema(url string, data []byte) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(jsonschema.SchemeURLLoader{})
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	return c.Compile(url)
}

var printer = message.NewPrinter(language.English)

// schemaProblems flattens a validation error to its leaves, each at its
// instance location.
func schemaProblems(verr *jsonschema.ValidationError) []ConfigProblem {
	var out []ConfigProblem
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		// A oneOf is reported as one problem where it has a message of its
		// own, rather than as the failure of each alternative.
		if _, ok := e.ErrorKind.(*kind.OneOf); ok || len(e.Causes) == 0 {
			out = append(out, leafProblems(e)...)
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(verr)
	return out
}

// leafProblems turns one leaf validation error into problems with readable
// messages. An unknown property becomes a problem at the property's own path.
func leafProblems(e *jsonschema.ValidationError) []ConfigProblem {
	ptr := pointer(e.InstanceLocation)
	def := schemaDef(e.SchemaURL)
	one := func(msg string) []ConfigProblem { return []ConfigProblem{{Path: ptr, Message: msg}} }
	switch k := e.ErrorKind.(type) {
	case *kind.AdditionalProperties:
		var out []ConfigProblem
		for _, name := range k.Properties {
			msg := fmt.Sprintf("unknown property %s", quote(name))
			if def == "env" {
				msg = fmt.Sprintf("invalid environment variable name %s: want letters, digits and '_', not starting with a digit", quote(name))
			}
			out = append(out, ConfigProblem{Path: ptr + "/" + escapeToken(name), Message: msg})
		}
		return out
	case *kind.Required:
		var out []ConfigProblem
		for _, name := range k.Missing {
			out = append(out, ConfigProblem{Path: ptr, Message: fmt.Sprintf("missing required property %s", quote(name))})
		}
		return out
	case *kind.OneOf:
		if def == "plugin" {
			if len(k.Subschemas) > 0 {
				return one(`"path", "source" and "module" are mutually exclusive: set exactly one`)
			}
			return one(`missing "path" (a plugin binary), "source" (a Go package directory) or "module" (a Go package in a published module): set exactly one`)
		}
		if len(e.Causes) > 0 {
			return schemaProblems(&jsonschema.ValidationError{Causes: e.Causes})
		}
	case *kind.DependentRequired:
		return []ConfigProblem{{
			Path:    ptr + "/" + escapeToken(k.Prop),
			Message: fmt.Sprintf("%s requires %s", quote(k.Prop), joinQuoted(k.Missing)),
		}}
	case *kind.Type:
		if ptr == "" {
			return one(fmt.Sprintf("the config must be a JSON object, got %s", k.Got))
		}
		return one(fmt.Sprintf("got %s, want %s", k.Got, strings.Join(k.Want, " or ")))
	case *kind.Pattern:
		switch def {
		case "name":
			return one(fmt.Sprintf("invalid name %s: want a letter followed by at most 63 letters, digits, '_' or '-'", quote(k.Got)))
		case "duration":
			return one(fmt.Sprintf("invalid duration %s: want a positive Go duration such as \"10s\" or \"1m30s\"", quote(k.Got)))
		case "sha256":
			return one(fmt.Sprintf("invalid sha256 %s: want 64 lowercase hex digits", quote(k.Got)))
		case "module_path", "module_version":
			return one(moduleProblem(def, k.Got))
		}
		return one(fmt.Sprintf("%s does not match pattern %s", quote(k.Got), quote(k.Want)))
	case *kind.Enum:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			want[i] = display(w)
		}
		return one(fmt.Sprintf("got %s, want one of %s", display(k.Got), strings.Join(want, ", ")))
	case *kind.MinLength:
		if k.Want == 1 {
			return one("must not be empty")
		}
	case *kind.MinItems:
		if k.Want == 1 {
			return one("must not be empty")
		}
	case *kind.Minimum:
		return one(fmt.Sprintf("got %s, want at least %s", ratString(k.Got), ratString(k.Want)))
	case *kind.Maximum:
		return one(fmt.Sprintf("got %s, want at most %s", ratString(k.Got), ratString(k.Want)))
	}
	return one(e.ErrorKind.LocalizedString(printer))
}

// schemaDef names the $defs entry a schema location points into ("" for
// others), so messages can say what a value is rather than which regexp failed.
func schemaDef(schemaURL string) string {
	_, frag, _ := strings.Cut(schemaURL, "#")
	name, ok := strings.CutPrefix(frag, "/$defs/")
	if !ok {
		return ""
	}
	name, _, _ = strings.Cut(name, "/")
	return name
}
