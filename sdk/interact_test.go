package sdk_test

import (
	"context"
	"errors"
	"testing"

	"github.com/toolhost/toolhost/sdk"
)

type answering struct{ content string }

func (a answering) Ask(context.Context, sdk.Question) (sdk.Answer, error) {
	return sdk.Answer{Action: sdk.Accepted, Content: []byte(a.content)}, nil
}

func (a answering) Sample(context.Context, sdk.SampleRequest) (sdk.SampleResult, error) {
	return sdk.SampleResult{Model: "m", Message: sdk.SampleMessage{Role: "assistant", Content: sdk.Text("done")}}, nil
}

const nameSchema = `{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}`

func TestAskAndSample(t *testing.T) {
	q := sdk.Question{Message: "name?", Schema: []byte(nameSchema)}
	sr := sdk.SampleRequest{Messages: []sdk.SampleMessage{{Role: "user", Content: sdk.Text("hi")}}, MaxTokens: 10}

	t.Run("NoOneToAnswerIsAnUnansweredError", func(t *testing.T) {
		_, err := sdk.Ask(t.Context(), q)
		var un *sdk.UnansweredError
		if !errors.As(err, &un) || !errors.Is(err, sdk.ErrUnanswered) || un.Op != "ask" {
			t.Errorf("Ask = %v, want an UnansweredError", err)
		}
		if _, err := sdk.Sample(t.Context(), sr); !errors.Is(err, sdk.ErrUnanswered) {
			t.Errorf("Sample = %v, want ErrUnanswered", err)
		}
	})
	t.Run("AnAnswerIsValidatedAgainstTheSchema", func(t *testing.T) {
		ctx := sdk.WithInteractor(t.Context(), answering{`{"name":"Ada"}`})
		if a, err := sdk.Ask(ctx, q); err != nil || a.Action != sdk.Accepted || string(a.Content) != `{"name":"Ada"}` {
			t.Errorf("Ask = %+v, %v", a, err)
		}
		ctx = sdk.WithInteractor(t.Context(), answering{`{"name":3}`})
		if _, err := sdk.Ask(ctx, q); err == nil {
			t.Error("an answer that does not match the schema: no error")
		}
		if res, err := sdk.Sample(ctx, sr); err != nil || res.Message.Content.Text != "done" {
			t.Errorf("Sample = %+v, %v", res, err)
		}
	})
	t.Run("AQuestionNeedsAnObjectSchema", func(t *testing.T) {
		ctx := sdk.WithInteractor(t.Context(), answering{`{}`})
		if _, err := sdk.Ask(ctx, sdk.Question{Message: "?", Schema: []byte(`{"type":"string"}`)}); err == nil {
			t.Error("a string schema: no error")
		}
	})
}
