package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/toolhost/toolhost/permission"
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
