package registry_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/toolhost/toolhost/internal/hosttest"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sdk"
)

// recorder is an Observer that writes down what it is told, one line per event.
type recorder struct {
	mu     sync.Mutex
	events []string
}

type stepKey struct{}

func (r *recorder) add(ev string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, ev)
}

func (r *recorder) StartSettle(ctx context.Context, location string, call registry.Call) (context.Context, registry.Settling) {
	r.add("start " + location + " " + call.Name)
	return ctx, &recording{r: r}
}

type recording struct{ r *recorder }

func (s *recording) Resolved(src registry.Source) { s.r.add("resolved " + src.ID()) }

func (s *recording) Step(ctx context.Context, step registry.Step) context.Context {
	s.r.add(string(step))
	return context.WithValue(ctx, stepKey{}, step)
}

func (s *recording) End(st *registry.Settlement, err error) {
	switch {
	case err != nil:
		s.r.add("end error")
	default:
		s.r.add("end " + string(st.Outcome))
	}
}

func TestObserverSeesEveryStepInOrder(t *testing.T) {
	rec := &recorder{}
	r := hosttest.Registry(t, registry.Options{Observer: rec})
	var executedIn registry.Step
	register(t, r, registry.Batch{Source: registry.Source{Kind: "plugin", Name: "p"}, Tools: map[string]sdk.Tool{
		"echo": sdk.NewTool("echoes", func(ctx context.Context, _ sdk.Invocation, in struct {
			Text string `json:"text"`
		}) (string, error) {
			executedIn, _ = ctx.Value(stepKey{}).(registry.Step)
			if in.Text == "fail" {
				return "", errors.New("broken")
			}
			return in.Text, nil
		}),
	}})
	q, err := r.Prepare(registry.Application)
	if err != nil {
		t.Fatal(err)
	}
	settleAndTake := func(name, input string) []string {
		t.Helper()
		rec.events = nil
		_, _ = q.Settle(context.Background(), registry.Call{Name: name, Input: json.RawMessage(input)})
		return rec.events
	}
	for _, tc := range []struct{ name, tool, input, want string }{
		{"Completed", "echo", `{"text":"hi"}`,
			"start  echo|resolved plugin:p|validate_input|execute|validate_output|project|bound|end completed"},
		{"InvalidInputSkipsExecutionButNotTheAfterHooks", "echo", `{"text":1}`,
			"start  echo|resolved plugin:p|validate_input|end invalid_input"},
		{"UnknownEndsAtOnce", "nope", `{}`, "start  nope|end unknown"},
		{"OperationalFailureEndsWithTheError", "echo", `{"text":"fail"}`,
			"start  echo|resolved plugin:p|validate_input|execute|end error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := strings.Join(settleAndTake(tc.tool, tc.input), "|"); got != tc.want {
				t.Errorf("events:\n got %s\nwant %s", got, tc.want)
			}
		})
	}
	if executedIn != registry.StepExecute {
		t.Errorf("the executor ran under the context of step %q, want the execute step's", executedIn)
	}
	if !slices.Contains(rec.events, "execute") {
		t.Fatal("no execute step recorded")
	}
}

func TestObserverSeesTheHookStepsOnlyWithHooks(t *testing.T) {
	rec := &recorder{}
	r := hosttest.Registry(t, registry.Options{Observer: rec})
	register(t, r, registry.Batch{Tools: map[string]sdk.Tool{"echo": constTool("hi")}})
	release, err := r.AddHook(registry.Application, func(_ context.Context, _ registry.Call, s *registry.Settlement) (*registry.Settlement, error) {
		return s, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	q, _ := r.Prepare(registry.Application)
	if _, err := q.Settle(context.Background(), registry.Call{Name: "echo"}); err != nil {
		t.Fatal(err)
	}
	want := "start  echo|resolved |before_hooks|validate_input|execute|validate_output|project|bound|after_hooks|end completed"
	if got := strings.Join(rec.events, "|"); got != want {
		t.Errorf("events:\n got %s\nwant %s", got, want)
	}
}
