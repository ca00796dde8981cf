package sdk_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"strings"
	"testing"

	"github.com/toolhost/toolhost/sdk"
)

type node struct {
	Name     string `json:"name" jsonschema:"description=the node's name"`
	Children []node `json:"children,omitempty"`
}

type searchIn struct {
	Query string `json:"query"`
	Limit int    `json:"limit,omitempty" jsonschema:"minimum=1,maximum=100"`
	Root  *node  `json:"root,omitempty"`
}

func TestSchemaFor(t *testing.T) {
	var schema map[string]any
	if err := json.Unmarshal(sdk.SchemaFor[searchIn](), &schema); err != nil {
		t.Fatal(err)
	}
	if schema["type"] != "object" || schema["additionalProperties"] != false {
		t.Fatalf("schema = %v, want a closed object", schema)
	}
	if req := fmt.Sprint(schema["required"]); req != "[query]" {
		t.Fatalf("required = %s, want only the field without omitempty", req)
	}
	props := schema["properties"].(map[string]any)
	if limit := props["limit"].(map[string]any); limit["minimum"] != 1.0 || limit["maximum"] != 100.0 {
		t.Fatalf("limit = %v, want the jsonschema tag's bounds", limit)
	}
	if _, ok := schema["$schema"]; ok {
		t.Fatal("derived schemas must not name a meta-schema URL")
	}
	defs := schema["$defs"].(map[string]any)
	if _, ok := defs["node"]; !ok {
		t.Fatalf("recursive type not in $defs: %v", defs)
	}
	if got := string(sdk.SchemaFor[string]()); got != `{"type":"string"}` {
		t.Fatalf("string schema = %s", got)
	}
}

func TestNewTool(t *testing.T) {
	var seen sdk.Invocation
	tool := sdk.NewTool("searches", func(_ context.Context, inv sdk.Invocation, in searchIn) ([]string, error) {
		seen = inv
		if in.Query == "fail" {
			return nil, sdk.Failf("no index for %q", in.Query)
		}
		return []string{in.Query, fmt.Sprint(in.Limit)}, nil
	})
	if tool.Description != "searches" || tool.Execute == nil || len(tool.InputSchema) == 0 || string(tool.OutputSchema) != `{"items":{"type":"string"},"type":"array"}` {
		t.Fatalf("tool = %+v", tool)
	}
	inv := sdk.Invocation{SessionID: "s", ToolCallID: "c"}

	t.Run("DecodesInputAndEncodesOutput", func(t *testing.T) {
		out, err := tool.Execute(t.Context(), inv, json.RawMessage(`{"query":"go","limit":3}`))
		if err != nil || string(out.JSON) != `["go","3"]` || seen != inv {
			t.Fatalf("out = %s, err = %v, invocation %+v", out.JSON, err, seen)
		}
	})
	t.Run("ToolFailurePassesThrough", func(t *testing.T) {
		_, err := tool.Execute(t.Context(), inv, json.RawMessage(`{"query":"fail"}`))
		var failure *sdk.ToolFailure
		if !errors.As(err, &failure) || failure.Message != `no index for "fail"` {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("UndecodableInputIsAnInputError", func(t *testing.T) {
		_, err := tool.Execute(t.Context(), inv, json.RawMessage(`{"query":"x","limit":1e400}`))
		var decodeErr *sdk.InputDecodingError
		if !errors.As(err, &decodeErr) {
			t.Fatalf("err = %v, want *InputDecodingError", err)
		}
	})
	t.Run("UnencodableOutputIsAnOutputError", func(t *testing.T) {
		nan := sdk.NewTool("", func(context.Context, sdk.Invocation, struct{}) (float64, error) { return math.Inf(1), nil })
		_, err := nan.Execute(t.Context(), inv, json.RawMessage(`{}`))
		var encodeErr *sdk.OutputEncodingError
		if !errors.As(err, &encodeErr) {
			t.Fatalf("err = %v, want *OutputEncodingError", err)
		}
	})
}

func TestFailfKeepsTheCause(t *testing.T) {
	err := sdk.Failf("cannot read %s: %w", "x.txt", fs.ErrNotExist)
	if err.Message != "cannot read x.txt: file does not exist" || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("failure = %q, cause kept: %v", err.Message, errors.Is(err, fs.ErrNotExist))
	}
}

func TestProjectTyped(t *testing.T) {
	project := sdk.ProjectTyped(func(in searchIn, out []string) []sdk.Part {
		return []sdk.Part{sdk.Text(in.Query + ": " + strings.Join(out, ","))}
	})
	if got := project(json.RawMessage(`{"query":"q"}`), json.RawMessage(`["a","b"]`)); len(got) != 1 || got[0].Text != "q: a,b" {
		t.Fatalf("projection = %+v", got)
	}
	if got := project(json.RawMessage(`{"query":1}`), json.RawMessage(`[]`)); got != nil {
		t.Fatalf("undecodable input must project to nothing, got %+v", got)
	}
}

func TestReportProgress(t *testing.T) {
	sdk.ReportProgress(context.Background(), sdk.Progress{Progress: 1}) // nobody listens: no-op
	var got []sdk.Progress
	ctx := sdk.WithProgress(context.Background(), func(p sdk.Progress) { got = append(got, p) })
	sdk.ReportProgress(ctx, sdk.Progress{Progress: 1, Total: 2, Message: "half"})
	if len(got) != 1 || got[0].Message != "half" {
		t.Fatalf("got %+v", got)
	}
}

// A typed tool: schemas come from the Go types, the executor gets decoded input.
func ExampleNewTool() {
	type In struct {
		Path string `json:"path" jsonschema:"description=file to count"`
	}
	type Out struct {
		Lines int `json:"lines"`
	}
	count := sdk.NewTool("Counts lines.", func(ctx context.Context, inv sdk.Invocation, in In) (Out, error) {
		if in.Path == "" {
			return Out{}, sdk.Failf("path is empty")
		}
		return Out{Lines: 42}, nil
	})
	fmt.Println(string(count.InputSchema))
	out, _ := count.Execute(context.Background(), sdk.Invocation{}, json.RawMessage(`{"path":"a.txt"}`))
	fmt.Println(string(out.JSON))
	// Output:
	// {"properties":{"path":{"type":"string","description":"file to count"}},"additionalProperties":false,"type":"object","required":["path"]}
	// {"lines":42}
}
