package registry_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"strings"

	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/tool"
)

// Embedding toolhost in an agent runtime: build a typed tool, register it, take a
// Request per model request, and settle the model's calls on it.
func Example() {
	dir, _ := os.MkdirTemp("", "tool-output")
	defer os.RemoveAll(dir)
	storage, err := registry.OpenStorage(dir, registry.StorageOptions{})
	if err != nil {
		log.Fatal(err)
	}
	reg, err := registry.New(registry.Options{Storage: storage})
	if err != nil {
		log.Fatal(err)
	}

	type In struct {
		Text string `json:"text" jsonschema:"description=the text to shout"`
	}
	shout := tool.New("Upper-cases text.", func(ctx context.Context, inv tool.Invocation, in In) (string, error) {
		if in.Text == "" {
			return "", tool.Failf("nothing to shout")
		}
		return strings.ToUpper(in.Text), nil
	})
	release, err := reg.Register(registry.Batch{
		Source: registry.Source{Kind: "application"},
		Tools:  map[string]tool.Tool{"shout": shout},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer release()

	req, err := reg.Prepare(registry.Application)
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range req.Definitions() {
		fmt.Printf("%s: %s %s\n", d.Name, d.Description, d.InputSchema)
	}
	inv := tool.Invocation{SessionID: "ses_1", Agent: "build", AssistantMessageID: "msg_1", ToolCallID: "call_1"}
	for _, input := range []string{`{"text":"hello"}`, `{"text":""}`, `{"txt":"typo"}`} {
		s, err := req.Settle(context.Background(), registry.Call{Name: "shout", Input: []byte(input), Invocation: inv})
		if err != nil {
			log.Fatal(err) // interruption, defect or operational failure: the runner's policy
		}
		fmt.Printf("%s: %q\n", s.Outcome, s.Text())
	}
	// Output:
	// shout: Upper-cases text. {"additionalProperties":false,"properties":{"text":{"description":"the text to shout","type":"string"}},"required":["text"],"type":"object"}
	// completed: "HELLO"
	// tool_failure: "nothing to shout"
	// invalid_input: "invalid input for \"shout\":\n- /: missing property 'text'\n- /: additional properties 'txt' not allowed\nexpected keys: text\nreceived keys: txt"
}
