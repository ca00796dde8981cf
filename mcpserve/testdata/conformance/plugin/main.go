// Command plugin implements, with the sdk, the tools the MCP conformance suite's
// server scenarios call (@modelcontextprotocol/conformance; see the package.json
// beside it for the pinned version). mcpserve's TestConformance and `make
// conformance` serve it with `toolhost mcp --http`.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/toolhost/toolhost/sdk"
)

var logger = hclog.New(&hclog.LoggerOptions{Output: os.Stderr, JSONFormat: true, Level: hclog.Info})

// png is a 1×1 red PNG; wav is a 44-byte silent WAV header with no samples.
var (
	png = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02\x00\x00\x00\x90wS\xde\x00\x00\x00\x0cIDATx\x9cc\xf8\xcf\xc0\x00\x00\x03\x01\x01\x00\xc9\xfe\x92\xef\x00\x00\x00\x00IEND\xaeB`\x82")
	wav = []byte("RIFF$\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00\x40\x1f\x00\x00\x80\x3e\x00\x00\x02\x00\x10\x00data\x00\x00\x00\x00")
)

type none struct{}

type promptInput struct {
	Prompt string `json:"prompt" jsonschema:"description=The prompt to send to the LLM"`
}

type messageInput struct {
	Message string `json:"message" jsonschema:"description=The message to show the user"`
}

// fixed is a tool without input whose content is parts.
func fixed(description string, parts ...sdk.Part) sdk.Tool {
	t := sdk.NewTool(description, func(context.Context, sdk.Invocation, none) (string, error) { return "", nil })
	t.Project = func(json.RawMessage, json.RawMessage) []sdk.Part { return parts }
	return t
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(d):
		return nil
	}
}

// ask puts a question and reports the answer as the suite expects.
func ask(ctx context.Context, message string, schema string) (string, error) {
	a, err := sdk.Ask(ctx, sdk.Question{Message: message, Schema: json.RawMessage(schema)})
	if err != nil {
		return "", sdk.Failf("elicitation failed: %v", err)
	}
	return fmt.Sprintf("Elicitation completed: action=%s, content=%s", a.Action, a.Content), nil
}

const schema2020 = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "$defs": {
    "address": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}
  },
  "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
  "additionalProperties": false
}`

func main() {
	sdk.Serve(sdk.ActivateFunc(func(ctx context.Context, loc sdk.Location, tools sdk.Tools) error {
		schemaTool := sdk.NewTool("Tool with JSON Schema 2020-12 features", func(context.Context, sdk.Invocation, json.RawMessage) (string, error) {
			return "ok", nil
		})
		schemaTool.InputSchema = json.RawMessage(schema2020)
		_, err := tools.Register(ctx, map[string]sdk.Tool{
			"test_simple_text":   fixed("Returns simple text.", sdk.Text("This is a simple text response for testing.")),
			"test_image_content": fixed("Returns an image.", sdk.Media("image/png", png)),
			"test_audio_content": fixed("Returns audio.", sdk.Media("audio/wav", wav)),
			"test_embedded_resource": fixed("Returns an embedded resource.",
				sdk.TextResource("test://embedded-resource", "text/plain", "This is an embedded resource content.")),
			"test_multiple_content_types": fixed("Returns text, an image and a resource.",
				sdk.Text("Multiple content types test:"), sdk.Media("image/png", png),
				sdk.TextResource("test://mixed-content-resource", "application/json", `{"test":"data","value":123}`)),
			"test_error_handling": sdk.NewTool("Always fails.", func(context.Context, sdk.Invocation, none) (string, error) {
				return "", sdk.Failf("This tool intentionally returns an error for testing")
			}),
			"test_tool_with_logging": sdk.NewTool("Logs three messages while it runs.", func(ctx context.Context, _ sdk.Invocation, _ none) (string, error) {
				logger.Info("Tool execution started")
				if err := sleep(ctx, 50*time.Millisecond); err != nil {
					return "", err
				}
				logger.Info("Tool processing data")
				if err := sleep(ctx, 50*time.Millisecond); err != nil {
					return "", err
				}
				logger.Info("Tool execution completed")
				return "Tool with logging executed successfully", nil
			}),
			"test_tool_with_progress": sdk.NewTool("Reports progress 0, 50 and 100 of 100.", func(ctx context.Context, _ sdk.Invocation, _ none) (string, error) {
				for i, p := range []float64{0, 50, 100} {
					if i > 0 {
						if err := sleep(ctx, 50*time.Millisecond); err != nil {
							return "", err
						}
					}
					sdk.ReportProgress(ctx, sdk.Progress{Progress: p, Total: 100})
				}
				return "Tool with progress executed successfully", nil
			}),
			"test_sampling": sdk.NewTool("Asks the client's model.", func(ctx context.Context, _ sdk.Invocation, in promptInput) (string, error) {
				res, err := sdk.Sample(ctx, sdk.SampleRequest{
					Messages:  []sdk.SampleMessage{{Role: "user", Content: sdk.Text(in.Prompt)}},
					MaxTokens: 100,
				})
				if err != nil {
					return "", sdk.Failf("sampling failed: %v", err)
				}
				return "LLM response: " + res.Message.Content.Text, nil
			}),
			"test_elicitation": sdk.NewTool("Asks the user for a username and an email address.", func(ctx context.Context, _ sdk.Invocation, in messageInput) (string, error) {
				a, err := sdk.Ask(ctx, sdk.Question{Message: in.Message, Schema: json.RawMessage(`{
  "type": "object",
  "properties": {
    "username": {"type": "string", "description": "User's response"},
    "email": {"type": "string", "description": "User's email address"}
  },
  "required": ["username", "email"]
}`)})
				if err != nil {
					return "", sdk.Failf("elicitation failed: %v", err)
				}
				return fmt.Sprintf("User response: action=%s, content=%s", a.Action, a.Content), nil
			}),
			"test_elicitation_sep1034_defaults": sdk.NewTool("Asks with a default for every primitive type (SEP-1034).", func(ctx context.Context, _ sdk.Invocation, _ none) (string, error) {
				return ask(ctx, "Please review and update the form fields with defaults", `{
  "type": "object",
  "properties": {
    "name": {"type": "string", "description": "User name", "default": "John Doe"},
    "age": {"type": "integer", "description": "User age", "default": 30},
    "score": {"type": "number", "description": "User score", "default": 95.5},
    "status": {"type": "string", "description": "User status", "enum": ["active", "inactive", "pending"], "default": "active"},
    "verified": {"type": "boolean", "description": "Verification status", "default": true}
  }
}`)
			}),
			"test_elicitation_sep1330_enums": sdk.NewTool("Asks with every enum form (SEP-1330).", func(ctx context.Context, _ sdk.Invocation, _ none) (string, error) {
				return ask(ctx, "Please select options from the enum fields", `{
  "type": "object",
  "properties": {
    "untitledSingle": {"type": "string", "description": "Select one option", "enum": ["option1", "option2", "option3"]},
    "titledSingle": {"type": "string", "description": "Select one option with titles", "oneOf": [
      {"const": "value1", "title": "First Option"}, {"const": "value2", "title": "Second Option"}, {"const": "value3", "title": "Third Option"}]},
    "legacyEnum": {"type": "string", "description": "Select one option (legacy)", "enum": ["opt1", "opt2", "opt3"], "enumNames": ["Option One", "Option Two", "Option Three"]},
    "untitledMulti": {"type": "array", "description": "Select multiple options", "minItems": 1, "maxItems": 3,
      "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
    "titledMulti": {"type": "array", "description": "Select multiple options with titles", "minItems": 1, "maxItems": 3,
      "items": {"anyOf": [{"const": "value1", "title": "First Choice"}, {"const": "value2", "title": "Second Choice"}, {"const": "value3", "title": "Third Choice"}]}}
  }
}`)
			}),
			"json_schema_2020_12_tool": schemaTool,
		})
		return err
	}))
}
