package registry

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/toolhost/toolhost/internal/askschema"
)

// The validator of tool.Ask's answers, in every process that links the registry (see
// internal/askschema for why it is not in the sdk).
func init() { askschema.Compile = compileQuestion }

// compileQuestion compiles a question's schema into the check of an answer.
func compileQuestion(schema json.RawMessage) (func(json.RawMessage) error, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(refuseLoader{})
	if err := c.AddResource("question.json", doc); err != nil {
		return nil, err
	}
	s, err := c.Compile("question.json")
	if err != nil {
		return nil, err
	}
	return func(content json.RawMessage) error {
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(content))
		if err != nil {
			return fmt.Errorf("not JSON: %w", err)
		}
		return s.Validate(v)
	}, nil
}
