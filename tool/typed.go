package tool

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/invopop/jsonschema"

	"github.com/toolhost/toolhost/internal/jsoncodec"
)

// New returns a typed tool: input is decoded into In, the result of execute is
// encoded from Out, and both schemas are derived from the Go types (see [SchemaFor]).
// Override either schema by setting the returned Tool's InputSchema or OutputSchema;
// the executor still decodes into In.
//
// execute receives the call's context and Invocation beside the decoded input. Return
// a *Failure for model-visible failures.
func New[In, Out any](description string, execute func(ctx context.Context, inv Invocation, in In) (Out, error)) Tool {
	return Tool{
		Description:  description,
		InputSchema:  SchemaFor[In](),
		OutputSchema: SchemaFor[Out](),
		Execute: func(ctx context.Context, inv Invocation, input json.RawMessage) (Output, error) {
			var in In
			if err := jsoncodec.Unmarshal(input, &in); err != nil {
				return Output{}, &InputDecodingError{Err: err}
			}
			out, err := execute(ctx, inv, in)
			if err != nil {
				return Output{}, err
			}
			data, err := jsoncodec.Marshal(out)
			if err != nil {
				return Output{}, &OutputEncodingError{Err: err}
			}
			return Output{JSON: data}, nil
		},
	}
}

// SchemaFor derives a self-contained JSON Schema from T with
// github.com/invopop/jsonschema: struct fields are named by their json tags, fields
// without omitempty are required, unknown properties are refused, and `jsonschema`
// struct tags add descriptions and constraints. Named nested types land in "$defs"
// and are referenced locally, so recursive types work, T itself included. It panics if T's schema cannot
// be encoded, which is a programming error found at construction.
func SchemaFor[T any]() json.RawMessage {
	r := jsonschema.Reflector{ExpandedStruct: true, Anonymous: true}
	s := r.ReflectFromType(reflect.TypeFor[T]())
	s.Version = "" // the registry compiles schemas as draft 2020-12 regardless
	selfContain(s)
	data, err := appendSchema(nil, s)
	if err != nil {
		panic(fmt.Sprintf("tool: derive schema for %v: %v", reflect.TypeFor[T](), err))
	}
	return data
}

// ProjectTyped adapts a typed projection to a [Projection]. The registry calls a
// projection only with input and output that validated against their schemas; if
// they still fail to decode into In and Out, the projection yields no content.
func ProjectTyped[In, Out any](project func(in In, out Out) []Part) Projection {
	return func(input, output json.RawMessage) []Part {
		var in In
		var out Out
		if jsoncodec.Unmarshal(input, &in) != nil || jsoncodec.Unmarshal(output, &out) != nil {
			return nil
		}
		return project(in, out)
	}
}
