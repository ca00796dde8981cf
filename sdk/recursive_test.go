package sdk_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolhost/toolhost/internal/hosttest"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sdk"
)

// Tree is directly recursive at the top level of a tool's input.
type Tree struct {
	Name     string `json:"name"`
	Children []Tree `json:"children,omitempty"`
}

// Dir and File are mutually recursive.
type Dir struct {
	Name  string `json:"name"`
	Files []File `json:"files,omitempty"`
}

type File struct {
	Name string `json:"name"`
	Size int    `json:"size"`
	Dir  *Dir   `json:"dir,omitempty"` // an archive unpacks into a directory
}

// TestRecursiveTypesRegisterAndValidate registers tools whose input and output are
// recursive types at the top level, as real tools of a registry, and settles real
// inputs: the schema SchemaFor derives is self-contained.
func TestRecursiveTypesRegisterAndValidate(t *testing.T) {
	r := hosttest.Registry(t, registry.Options{})
	release, err := r.Register(registry.Batch{Location: registry.Application, Tools: map[string]sdk.Tool{
		"tree": sdk.NewTool("echoes a tree", func(_ context.Context, _ sdk.Invocation, in Tree) (Tree, error) { return in, nil }),
		"dir":  sdk.NewTool("echoes a directory", func(_ context.Context, _ sdk.Invocation, in Dir) (Dir, error) { return in, nil }),
	}})
	if err != nil {
		t.Fatalf("registering recursive types: %v", err)
	}
	t.Cleanup(release)
	q, err := r.Prepare(registry.Application)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range q.Definitions() {
		var schema map[string]any
		if err := json.Unmarshal(d.InputSchema, &schema); err != nil || schema["type"] != "object" {
			t.Errorf("%s: input schema %s is not an object schema at its root", d.Name, d.InputSchema)
		}
	}
	for _, tt := range []struct {
		name, tool, input string
		want              registry.Outcome
		pointer           string // of the problem, for an invalid input
	}{
		{"TreeValid", "tree", `{"name":"a","children":[{"name":"b","children":[{"name":"c"}]}]}`, registry.Completed, ""},
		{"TreeNestedChildInvalid", "tree", `{"name":"a","children":[{"name":"b","children":[{"name":7}]}]}`, registry.InvalidInput, "/children/0/children/0/name"},
		{"TreeNestedChildUnexpectedKey", "tree", `{"name":"a","children":[{"name":"b","colour":"red"}]}`, registry.InvalidInput, "/children/0"},
		{"DirValid", "dir", `{"name":"a","files":[{"name":"x.zip","size":1,"dir":{"name":"x","files":[{"name":"y","size":2}]}}]}`, registry.Completed, ""},
		{"DirNestedFileInvalid", "dir", `{"name":"a","files":[{"name":"x.zip","size":1,"dir":{"name":"x","files":[{"name":"y"}]}}]}`, registry.InvalidInput, "/files/0/dir/files/0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := q.Settle(t.Context(), registry.Call{Name: tt.tool, Input: json.RawMessage(tt.input)})
			if err != nil {
				t.Fatal(err)
			}
			if s.Outcome != tt.want {
				t.Fatalf("outcome = %s (%s), want %s", s.Outcome, s.Text(), tt.want)
			}
			if tt.want == registry.Completed {
				if s.Text() != tt.input && string(s.Structured) != tt.input {
					t.Fatalf("output = %s / %s, want the input echoed", s.Text(), s.Structured)
				}
				return
			}
			if len(s.Problems) == 0 || s.Problems[0].Pointer != tt.pointer {
				t.Fatalf("problems = %+v, want one at %s", s.Problems, tt.pointer)
			}
			if !strings.Contains(s.Text(), tt.pointer+": ") {
				t.Fatalf("text %q does not point at %s", s.Text(), tt.pointer)
			}
		})
	}
}
