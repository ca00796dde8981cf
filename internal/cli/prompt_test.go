package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/toolhost/toolhost/permission"
	_ "github.com/toolhost/toolhost/registry" // validates answers (askschema)
	"github.com/toolhost/toolhost/sdk"
)

func TestPromptAsker(t *testing.T) {
	req := permission.Request{Action: "grep", Resources: []string{"src"}, Source: permission.Source{Tool: "grep"}}
	tests := []struct {
		name  string
		typed string
		want  permission.Answer
	}{
		{"Once", "o\n", permission.Answer{Reply: permission.Once}},
		{"Always", "always\n", permission.Answer{Reply: permission.Always}},
		{"RejectWithMessage", "r\nuse the staging server\n", permission.Answer{Reply: permission.Reject, Message: "use the staging server"}},
		{"RejectWithoutMessage", "r\n\n", permission.Answer{Reply: permission.Reject}},
		{"AsksAgainOnNonsense", "maybe\nyes\n", permission.Answer{Reply: permission.Once}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			got, err := newPromptAsker(strings.NewReader(tt.typed), &out).Ask(t.Context(), "ask_1", req)
			if err != nil || got != tt.want {
				t.Fatalf("answer %+v, %v; want %+v", got, err, tt.want)
			}
			if !strings.Contains(out.String(), `tool "grep" asks to grep src`) {
				t.Fatalf("prompt %q does not say what is asked", out.String())
			}
		})
	}
	t.Run("EndOfInputIsAnError", func(t *testing.T) {
		_, err := newPromptAsker(strings.NewReader(""), io.Discard).Ask(t.Context(), "ask_1", req)
		if !errors.Is(err, io.EOF) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("CancelledWhileWaiting", func(t *testing.T) {
		r, w := io.Pipe()
		defer w.Close()
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := newPromptAsker(r, io.Discard).Ask(ctx, "ask_1", req)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v", err)
		}
		w.Write([]byte("o\n")) // lets the reading goroutine finish
	})
}

func TestQuestionPrompt(t *testing.T) {
	simple := sdk.Question{Message: "Which?", Schema: json.RawMessage(`{"type": "object", "properties": {
		"color": {"type": "string", "enum": ["red", "blue"]}, "count": {"type": "integer"},
		"tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}}}, "required": ["color"]}`)}
	nested := sdk.Question{Message: "Where?", Schema: json.RawMessage(`{"type": "object", "properties": {
		"place": {"type": "object", "properties": {"x": {"type": "number"}}}}}`)}
	tests := []struct {
		name  string
		q     sdk.Question
		typed string
		want  sdk.Answer
	}{
		{"Decline", simple, "d\n", sdk.Answer{Action: sdk.Declined}},
		{"Cancel", simple, "c\n", sdk.Answer{Action: sdk.Cancelled}},
		{"FieldsInTheirOrder", simple, "a\nblue\n3\na, b\n", sdk.Answer{Action: sdk.Accepted, Content: json.RawMessage(`{"color":"blue","count":3,"tags":["a","b"]}`)}},
		{"RequiredAskedAgainOptionalLeftOut", simple, "a\n\ngreen\nred\n\n\n", sdk.Answer{Action: sdk.Accepted, Content: json.RawMessage(`{"color":"red"}`)}},
		{"NotSimpleIsJSON", nested, "answer\nnope\n{\"place\": {\"x\": \"far\"}}\n{\"place\": {\"x\": 1}}\n", sdk.Answer{Action: sdk.Accepted, Content: json.RawMessage(`{"place": {"x": 1}}`)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			got, err := questionPrompt{newPromptAsker(strings.NewReader(tt.typed), &out)}.Ask(t.Context(), tt.q)
			if err != nil || got.Action != tt.want.Action || string(got.Content) != string(tt.want.Content) {
				t.Fatalf("answer %s %s, %v; want %s %s\n%s", got.Action, got.Content, err, tt.want.Action, tt.want.Content, out.String())
			}
			if !strings.Contains(out.String(), tt.q.Message) {
				t.Errorf("the prompt does not show the question:\n%s", out.String())
			}
		})
	}
	t.Run("SampleIsUnanswered", func(t *testing.T) {
		_, err := questionPrompt{newPromptAsker(strings.NewReader(""), io.Discard)}.Sample(t.Context(), sdk.SampleRequest{})
		if !errors.Is(err, sdk.ErrUnanswered) {
			t.Fatalf("err = %v", err)
		}
	})
}
