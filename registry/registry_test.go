package registry_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/toolhost/toolhost/internal/hosttest"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/scope"
	"github.com/toolhost/toolhost/sdk"
)

func TestMain(m *testing.M) {
	registry.RunTestHelper()
	goleak.VerifyTestMain(m)
}

// constTool returns a tool whose output is the JSON string answer.
func constTool(answer string) sdk.Tool {
	return sdk.NewTool("answers "+answer, func(context.Context, sdk.Invocation, struct{}) (string, error) {
		return answer, nil
	})
}

func register(t testing.TB, r *registry.Registry, b registry.Batch) func() {
	t.Helper()
	release, err := r.Register(b)
	if err != nil {
		t.Fatal(err)
	}
	return release
}

func settle(t testing.TB, q *registry.Request, name, input string) *registry.Settlement {
	t.Helper()
	s, err := q.Settle(context.Background(), registry.Call{Name: name, Input: json.RawMessage(input), Invocation: sdk.Invocation{ToolCallID: "call-1"}})
	if err != nil {
		t.Fatalf("settle %s: %v", name, err)
	}
	return s
}

// answer prepares a Request in location and returns the text the named tool answers.
func answer(t testing.TB, r *registry.Registry, location, name string) string {
	t.Helper()
	q, err := r.Prepare(location)
	if err != nil {
		t.Fatal(err)
	}
	s := settle(t, q, name, `{}`)
	if s.Outcome != registry.Completed {
		return string(s.Outcome)
	}
	return s.Text()
}

func TestOverlay(t *testing.T) {
	app := registry.Source{Kind: "application"}
	t.Run("LatestWinsAndCloseReveals", func(t *testing.T) {
		r := hosttest.Registry(t, registry.Options{})
		release1 := register(t, r, registry.Batch{Source: app, Tools: map[string]sdk.Tool{"echo": constTool("first")}})
		release2 := register(t, r, registry.Batch{Source: app, Tools: map[string]sdk.Tool{"echo": constTool("second")}})
		if got := answer(t, r, registry.Application, "echo"); got != "second" {
			t.Fatalf("got %q, want the latest registration", got)
		}
		release2()
		if got := answer(t, r, registry.Application, "echo"); got != "first" {
			t.Fatalf("after closing the winner got %q, want the earlier one revealed", got)
		}
		release1()
		if got := answer(t, r, registry.Application, "echo"); got != string(registry.Unknown) {
			t.Fatalf("after closing both got %q, want unknown", got)
		}
	})
	t.Run("ClosingNonWinnerChangesNothing", func(t *testing.T) {
		r := hosttest.Registry(t, registry.Options{})
		release1 := register(t, r, registry.Batch{Source: app, Tools: map[string]sdk.Tool{"echo": constTool("first")}})
		register(t, r, registry.Batch{Source: app, Tools: map[string]sdk.Tool{"echo": constTool("second")}})
		release1()
		release1() // idempotent
		if got := answer(t, r, registry.Application, "echo"); got != "second" {
			t.Fatalf("got %q, want the winner to stay", got)
		}
	})
	t.Run("OneReleasePerBatch", func(t *testing.T) {
		r := hosttest.Registry(t, registry.Options{})
		release := register(t, r, registry.Batch{Source: app, Tools: map[string]sdk.Tool{"a": constTool("a"), "b": constTool("b")}})
		register(t, r, registry.Batch{Source: app, Tools: map[string]sdk.Tool{"c": constTool("c")}})
		release()
		q, _ := r.Prepare(registry.Application)
		if defs := q.Definitions(); len(defs) != 1 || defs[0].Name != "c" {
			t.Fatalf("definitions = %v, want only c", defs)
		}
	})
	t.Run("LocationBeatsApplicationAndCloseRevealsIt", func(t *testing.T) {
		r := hosttest.Registry(t, registry.Options{})
		hosttest.OpenLocation(t, r, "/ws")
		register(t, r, registry.Batch{Source: app, Tools: map[string]sdk.Tool{"echo": constTool("app")}})
		releaseLoc := register(t, r, registry.Batch{Location: "/ws", Source: registry.Source{Kind: "plugin", Name: "p"}, Tools: map[string]sdk.Tool{"echo": constTool("location")}})
		// A later application registration still loses to the Location's.
		register(t, r, registry.Batch{Source: app, Tools: map[string]sdk.Tool{"echo": constTool("app later")}})
		if got := answer(t, r, "/ws", "echo"); got != "location" {
			t.Fatalf("got %q, want the Location's tool", got)
		}
		if got := answer(t, r, registry.Application, "echo"); got != "app later" {
			t.Fatalf("application placement got %q", got)
		}
		releaseLoc()
		if got := answer(t, r, "/ws", "echo"); got != "app later" {
			t.Fatalf("after Location close got %q, want the application tool", got)
		}
	})
	t.Run("LocationsAreIsolated", func(t *testing.T) {
		r := hosttest.Registry(t, registry.Options{})
		hosttest.OpenLocation(t, r, "/a")
		hosttest.OpenLocation(t, r, "/b")
		register(t, r, registry.Batch{Location: "/a", Tools: map[string]sdk.Tool{"only_a": constTool("a")}})
		q, _ := r.Prepare("/b")
		if len(q.Definitions()) != 0 {
			t.Fatalf("location /b sees %v", q.Definitions())
		}
		if _, err := r.OpenLocation("/a", registry.Limits{}); !errors.Is(err, registry.ErrLocationOpen) {
			t.Fatalf("reopen = %v, want ErrLocationOpen", err)
		}
		if _, err := r.Register(registry.Batch{Location: "/nope", Tools: map[string]sdk.Tool{"x": constTool("x")}}); !errors.Is(err, registry.ErrLocationNotOpen) {
			t.Fatalf("register into unopened location = %v", err)
		}
	})
	t.Run("MutatingTheMapAfterwardsChangesNothing", func(t *testing.T) {
		r := hosttest.Registry(t, registry.Options{})
		tools := map[string]sdk.Tool{"echo": constTool("kept")}
		register(t, r, registry.Batch{Source: app, Tools: tools})
		tools["echo"] = constTool("changed")
		tools["extra"] = constTool("extra")
		q, _ := r.Prepare(registry.Application)
		if len(q.Definitions()) != 1 || answer(t, r, registry.Application, "echo") != "kept" {
			t.Fatal("the registry saw a change to the caller's map")
		}
	})
}

func TestDefinitions(t *testing.T) {
	r := hosttest.Registry(t, registry.Options{})
	register(t, r, registry.Batch{Tools: map[string]sdk.Tool{
		"zeta":       constTool("z"),
		"alpha":      {Description: "d", InputSchema: json.RawMessage(`{ "type" : "object", "properties": {"b": {"type":"string"}, "a": {"type":"integer"}} }`), Execute: nopExecute},
		"my.tool v2": constTool("m"),
	}})
	q, _ := r.Prepare(registry.Application)
	var names []string
	for _, d := range q.Definitions() {
		names = append(names, d.Name)
	}
	if strings.Join(names, ",") != "alpha,my_tool_v2,zeta" {
		t.Fatalf("names = %v, want sorted normalized names", names)
	}
	if got := string(q.Definitions()[0].InputSchema); got != `{"properties":{"a":{"type":"integer"},"b":{"type":"string"}},"type":"object"}` {
		t.Fatalf("schema not canonical: %s", got)
	}
	first, _ := json.Marshal(q.Definitions())
	q2, _ := r.Prepare(registry.Application)
	second, _ := json.Marshal(q2.Definitions())
	if string(first) != string(second) {
		t.Fatal("definitions are not byte-stable across requests")
	}
}

func nopExecute(context.Context, sdk.Invocation, json.RawMessage) (sdk.Output, error) {
	return sdk.Output{JSON: json.RawMessage(`{}`)}, nil
}

func TestRegisterRefusesBadBatches(t *testing.T) {
	good := constTool("ok")
	schema := func(s string) sdk.Tool {
		return sdk.Tool{Description: "d", InputSchema: json.RawMessage(s), Execute: nopExecute}
	}
	tests := []struct {
		name  string
		tools map[string]sdk.Tool
		tool  string // the authored name the error must name
		want  string // substring of the error
	}{
		{"NameStartsWithDigit", map[string]sdk.Tool{"ok": good, "1bad": good}, "1bad", "must start with a letter"},
		{"NameTooLong", map[string]sdk.Tool{strings.Repeat("a", 65): good}, strings.Repeat("a", 65), "1 to 64"},
		{"EmptyName", map[string]sdk.Tool{"": good}, "", "must start with a letter"},
		{"NamesNormalizeToTheSameName", map[string]sdk.Tool{"a.b": good, "a b": good}, "a.b", `both normalize to "a_b"`},
		{"SchemaNotJSON", map[string]sdk.Tool{"t": schema(`{`)}, "t", "input schema: not JSON"},
		{"SchemaUncompilable", map[string]sdk.Tool{"t": schema(`{"type": 12}`)}, "t", "input schema"},
		{"SchemaRemoteRef", map[string]sdk.Tool{"t": schema(`{"$ref": "https://example.com/s.json"}`)}, "t", "refused"},
		{"SchemaFileRef", map[string]sdk.Tool{"t": schema(`{"$ref": "file:///etc/passwd"}`)}, "t", "refused"},
		{"SchemaNotAnObject", map[string]sdk.Tool{"t": schema(`[1]`)}, "t", "must be a JSON object"},
		{"NoExecutor", map[string]sdk.Tool{"t": {InputSchema: json.RawMessage(`{}`)}}, "t", "no executor"},
		{"BadOutputSchema", map[string]sdk.Tool{"t": {InputSchema: json.RawMessage(`{}`), OutputSchema: json.RawMessage(`{"minimum": "x"}`), Execute: nopExecute}}, "t", "output schema"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := hosttest.Registry(t, registry.Options{})
			_, err := r.Register(registry.Batch{Source: registry.Source{Kind: "plugin", Name: "p"}, Tools: tt.tools})
			var rerr *registry.RegistrationError
			if !errors.As(err, &rerr) {
				t.Fatalf("err = %v, want *RegistrationError", err)
			}
			if rerr.Tool != tt.tool || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "plugin p") {
				t.Fatalf("err = %v (tool %q), want it to name %q, the source and %q", err, rerr.Tool, tt.tool, tt.want)
			}
			q, _ := r.Prepare(registry.Application)
			if len(q.Definitions()) != 0 {
				t.Fatalf("a refused batch left %v registered", q.Definitions())
			}
		})
	}
	t.Run("IntoClosedScope", func(t *testing.T) {
		r := hosttest.Registry(t, registry.Options{})
		s := scope.New(context.Background())
		s.Close(t.Context())
		_, err := r.Register(registry.Batch{Owner: s, Tools: map[string]sdk.Tool{"t": good}})
		if !errors.Is(err, registry.ErrOwnerClosed) {
			t.Fatalf("err = %v, want ErrOwnerClosed", err)
		}
		q, _ := r.Prepare(registry.Application)
		if len(q.Definitions()) != 0 {
			t.Fatal("tools registered into a closed scope are visible")
		}
	})
}

func TestCapture(t *testing.T) {
	src := registry.Source{Kind: "plugin", Name: "p", Generation: 1}
	t.Run("ReplacedRegistrationStillRunsForOldRequest", func(t *testing.T) {
		r := hosttest.Registry(t, registry.Options{})
		register(t, r, registry.Batch{Source: src, Tools: map[string]sdk.Tool{"echo": constTool("old")}})
		old, _ := r.Prepare(registry.Application)
		register(t, r, registry.Batch{Source: src, Tools: map[string]sdk.Tool{"echo": constTool("new")}})
		if got := settle(t, old, "echo", `{}`).Text(); got != "old" {
			t.Fatalf("old request ran %q, want the captured registration", got)
		}
		if got := answer(t, r, registry.Application, "echo"); got != "new" {
			t.Fatalf("new request ran %q", got)
		}
	})
	t.Run("ClosedRegistrationRunsOnIdenticalSuccessor", func(t *testing.T) {
		r := hosttest.Registry(t, registry.Options{})
		release := register(t, r, registry.Batch{Source: src, Tools: map[string]sdk.Tool{"echo": withDescription(constTool("gen1"), "same")}})
		old, _ := r.Prepare(registry.Application)
		next := src
		next.Generation = 2
		register(t, r, registry.Batch{Source: next, Tools: map[string]sdk.Tool{"echo": withDescription(constTool("gen2"), "same")}})
		release()
		if got := settle(t, old, "echo", `{}`).Text(); got != "gen2" {
			t.Fatalf("got %q, want the identical successor to run", got)
		}
	})
	t.Run("ClosedRegistrationWithChangedContractIsUnavailable", func(t *testing.T) {
		r := hosttest.Registry(t, registry.Options{})
		release := register(t, r, registry.Batch{Source: src, Tools: map[string]sdk.Tool{"echo": constTool("gen1")}})
		old, _ := r.Prepare(registry.Application)
		next := src
		next.Generation = 2
		var ran atomic.Bool
		changed := sdk.NewTool("a different description", func(context.Context, sdk.Invocation, struct{}) (string, error) {
			ran.Store(true)
			return "gen2", nil
		})
		register(t, r, registry.Batch{Source: next, Tools: map[string]sdk.Tool{"echo": changed}})
		release()
		s := settle(t, old, "echo", `{}`)
		if s.Outcome != registry.Unavailable || ran.Load() {
			t.Fatalf("outcome %s (ran=%v), want unavailable without invoking anything", s.Outcome, ran.Load())
		}
	})
	t.Run("ClosedRegistrationFromOtherSourceIsUnavailable", func(t *testing.T) {
		r := hosttest.Registry(t, registry.Options{})
		release := register(t, r, registry.Batch{Source: src, Tools: map[string]sdk.Tool{"echo": withDescription(constTool("p"), "same")}})
		old, _ := r.Prepare(registry.Application)
		register(t, r, registry.Batch{Source: registry.Source{Kind: "plugin", Name: "other", Generation: 5}, Tools: map[string]sdk.Tool{"echo": withDescription(constTool("other"), "same")}})
		release()
		if s := settle(t, old, "echo", `{}`); s.Outcome != registry.Unavailable {
			t.Fatalf("outcome %s, want unavailable", s.Outcome)
		}
	})
	t.Run("ClosedWithNoSuccessorIsUnavailable", func(t *testing.T) {
		r := hosttest.Registry(t, registry.Options{})
		release := register(t, r, registry.Batch{Source: src, Tools: map[string]sdk.Tool{"echo": constTool("x")}})
		old, _ := r.Prepare(registry.Application)
		release()
		if s := settle(t, old, "echo", `{}`); s.Outcome != registry.Unavailable || !s.IsError() {
			t.Fatalf("outcome %s, want unavailable", s.Outcome)
		}
	})
}

func withDescription(t sdk.Tool, d string) sdk.Tool {
	t.Description = d
	return t
}

type echoIn struct {
	Text  string `json:"text"`
	Count int    `json:"count,omitempty"`
}

type echoOut struct {
	Echo string `json:"echo"`
}

func TestExecution(t *testing.T) {
	t.Run("ExactInvocationReachesExecutor", func(t *testing.T) {
		r := hosttest.Registry(t, registry.Options{})
		var got sdk.Invocation
		var gotIn echoIn
		register(t, r, registry.Batch{Tools: map[string]sdk.Tool{"echo": sdk.NewTool("echo", func(_ context.Context, inv sdk.Invocation, in echoIn) (echoOut, error) {
			got, gotIn = inv, in
			return echoOut{Echo: in.Text}, nil
		})}})
		q, _ := r.Prepare(registry.Application)
		inv := sdk.Invocation{SessionID: "ses", Agent: "build", AssistantMessageID: "msg-7", ToolCallID: "call-9"}
		s, err := q.Settle(t.Context(), registry.Call{Name: "echo", Input: json.RawMessage(`{"text":"hi","count":2}`), Invocation: inv})
		if err != nil {
			t.Fatal(err)
		}
		if got != inv || gotIn != (echoIn{Text: "hi", Count: 2}) {
			t.Fatalf("executor saw %+v %+v", got, gotIn)
		}
		if s.Outcome != registry.Completed || string(s.Structured) != `{"echo":"hi"}` || s.Text() != `{"echo":"hi"}` || s.ToolCallID != "call-9" {
			t.Fatalf("settlement = %+v, want the structured output, and its JSON as the model content", s)
		}
	})
	t.Run("ProjectionSeesInputAndEncodedOutput", func(t *testing.T) {
		r := hosttest.Registry(t, registry.Options{})
		tool := sdk.NewTool("echo", func(_ context.Context, _ sdk.Invocation, in echoIn) (echoOut, error) {
			return echoOut{Echo: strings.ToUpper(in.Text)}, nil
		})
		var seenIn, seenOut string
		tool.Project = func(input, output json.RawMessage) []sdk.Part {
			seenIn, seenOut = string(input), string(output)
			return []sdk.Part{sdk.Text("projected"), sdk.Media("image/png", []byte{1, 2})}
		}
		register(t, r, registry.Batch{Tools: map[string]sdk.Tool{"echo": tool}})
		q, _ := r.Prepare(registry.Application)
		s := settle(t, q, "echo", `{"text":"hi"}`)
		if seenIn != `{"text":"hi"}` || seenOut != `{"echo":"HI"}` {
			t.Fatalf("projection saw %s %s", seenIn, seenOut)
		}
		if s.Text() != "projected" || len(s.Content) != 2 || string(s.Structured) != `{"echo":"HI"}` {
			t.Fatalf("settlement = %+v", s)
		}
	})
	t.Run("StringOutputBecomesTextOnly", func(t *testing.T) {
		r := hosttest.Registry(t, registry.Options{})
		register(t, r, registry.Batch{Tools: map[string]sdk.Tool{"hello": constTool("hello, world")}})
		q, _ := r.Prepare(registry.Application)
		s := settle(t, q, "hello", ``)
		if s.Text() != "hello, world" || s.Structured != nil {
			t.Fatalf("settlement = %+v", s)
		}
	})
	t.Run("SmallerStructuredResultIsValidated", func(t *testing.T) {
		r := hosttest.Registry(t, registry.Options{})
		tool := sdk.Tool{
			InputSchema:      json.RawMessage(`{"type":"object"}`),
			StructuredSchema: json.RawMessage(`{"type":"object","required":["n"]}`),
			Execute: func(_ context.Context, _ sdk.Invocation, input json.RawMessage) (sdk.Output, error) {
				if string(input) == `{"bad":true}` {
					return sdk.Output{JSON: json.RawMessage(`{"big":1,"n":2}`), Structured: json.RawMessage(`{}`)}, nil
				}
				return sdk.Output{JSON: json.RawMessage(`{"big":1,"n":2}`), Structured: json.RawMessage(`{"n":2}`)}, nil
			},
		}
		register(t, r, registry.Batch{Tools: map[string]sdk.Tool{"t": tool}})
		q, _ := r.Prepare(registry.Application)
		if s := settle(t, q, "t", `{}`); string(s.Structured) != `{"n":2}` {
			t.Fatalf("structured = %s", s.Structured)
		}
		if s := settle(t, q, "t", `{"bad":true}`); s.Outcome != registry.InvalidOutput {
			t.Fatalf("outcome = %s, want invalid output", s.Outcome)
		}
	})
}

func TestOutcomes(t *testing.T) {
	r := hosttest.Registry(t, registry.Options{})
	var calls atomic.Int32
	counted := func(fn func(ctx context.Context, in echoIn) (echoOut, error)) sdk.Tool {
		return sdk.NewTool("t", func(ctx context.Context, _ sdk.Invocation, in echoIn) (echoOut, error) {
			calls.Add(1)
			return fn(ctx, in)
		})
	}
	badOutput := counted(func(context.Context, echoIn) (echoOut, error) { return echoOut{}, nil })
	badOutput.OutputSchema = json.RawMessage(`{"type":"object","properties":{"echo":{"minLength":1}}}`)
	register(t, r, registry.Batch{Tools: map[string]sdk.Tool{
		"ok": counted(func(_ context.Context, in echoIn) (echoOut, error) { return echoOut{Echo: in.Text}, nil }),
		"fail": counted(func(context.Context, echoIn) (echoOut, error) {
			return echoOut{}, sdk.Failf("no such file %q", "x.txt")
		}),
		"nan": sdk.NewTool("t", func(context.Context, sdk.Invocation, echoIn) (float64, error) {
			return math.NaN(), nil
		}),
		"bad_output": badOutput,
		"garbage": {InputSchema: json.RawMessage(`{}`), Execute: func(context.Context, sdk.Invocation, json.RawMessage) (sdk.Output, error) {
			return sdk.Output{JSON: json.RawMessage(`{"unterminated`)}, nil
		}},
		"not_text": {InputSchema: json.RawMessage(`{}`), OutputSchema: json.RawMessage(`{"type": "string"}`), Execute: func(context.Context, sdk.Invocation, json.RawMessage) (sdk.Output, error) {
			return sdk.Output{JSON: json.RawMessage(`42`)}, nil
		}},
		"panics": counted(func(context.Context, echoIn) (echoOut, error) { panic("boom") }),
		"broken": counted(func(context.Context, echoIn) (echoOut, error) { return echoOut{}, errors.New("connection reset") }),
	}})
	q, _ := r.Prepare(registry.Application)

	tests := []struct {
		name, tool, input string
		outcome           registry.Outcome
		text              []string // substrings of the model-visible text
		executed          bool
	}{
		{"Completed", "ok", `{"text":"hi"}`, registry.Completed, nil, true},
		{"ToolFailure", "fail", `{"text":"hi"}`, registry.ToolFailed, []string{`no such file "x.txt"`}, true},
		{"Unknown", "missing", `{}`, registry.Unknown, []string{`unknown tool "missing"`}, false},
		{"InputNotJSON", "ok", `{"text":`, registry.InvalidInput, []string{"not valid JSON"}, false},
		{"InputTrailingGarbage", "ok", `{"text":"a"} x`, registry.InvalidInput, []string{"not valid JSON"}, false},
		{"InputViolatesSchema", "ok", `{"count":"two","extra":1}`, registry.InvalidInput, []string{"/count", "missing property 'text'", "extra", "expected keys: count, text", "received keys: count, extra"}, false},
		{"InputTooLarge", "ok", `{"text":"` + strings.Repeat("a", 5<<20) + `"}`, registry.InvalidInput, []string{"byte limit"}, false},
		{"OutputNotEncodable", "nan", `{"text":"hi"}`, registry.InvalidOutput, []string{"unsupported value"}, false},
		{"OutputViolatesSchema", "bad_output", `{"text":"hi"}`, registry.InvalidOutput, []string{"/echo"}, true},
		{"OutputNotJSON", "garbage", `{}`, registry.InvalidOutput, []string{"not valid JSON"}, false},
		{"OutputNotText", "not_text", `{}`, registry.InvalidOutput, []string{"/: got number, want string"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := calls.Load()
			s := settle(t, q, tt.tool, tt.input)
			if s.Outcome != tt.outcome {
				t.Fatalf("outcome = %s (%s), want %s", s.Outcome, s.Text(), tt.outcome)
			}
			if s.IsError() != (tt.outcome != registry.Completed) {
				t.Fatal("IsError disagrees with the outcome")
			}
			for _, want := range tt.text {
				if !strings.Contains(s.Text(), want) {
					t.Errorf("text %q does not contain %q", s.Text(), want)
				}
			}
			if executed := calls.Load() != before; executed != tt.executed {
				t.Fatalf("executed = %v, want %v", executed, tt.executed)
			}
		})
	}

	t.Run("DefectIsAnErrorNotASettlement", func(t *testing.T) {
		s, err := q.Settle(t.Context(), registry.Call{Name: "panics", Input: json.RawMessage(`{"text":"x"}`)})
		var defect *registry.DefectError
		if s != nil || !errors.As(err, &defect) || defect.Value != "boom" || len(defect.Stack) == 0 {
			t.Fatalf("settle = %v, %v; want a *DefectError with the panic value and stack", s, err)
		}
	})
	t.Run("OperationalFailureIsAnError", func(t *testing.T) {
		s, err := q.Settle(t.Context(), registry.Call{Name: "broken", Input: json.RawMessage(`{"text":"x"}`)})
		var op *registry.OperationalError
		if s != nil || !errors.As(err, &op) || op.Op != "execute" || !strings.Contains(err.Error(), "connection reset") {
			t.Fatalf("settle = %v, %v; want an *OperationalError", s, err)
		}
	})
}

func TestInterruption(t *testing.T) {
	started := make(chan struct{})
	var returned atomic.Bool
	blocking := sdk.NewTool("waits", func(ctx context.Context, _ sdk.Invocation, _ struct{}) (string, error) {
		close(started)
		<-ctx.Done()
		returned.Store(true)
		return "", sdk.Failf("should never be shown: %w", ctx.Err())
	})
	t.Run("RunnerCancel", func(t *testing.T) {
		r := hosttest.Registry(t, registry.Options{})
		started = make(chan struct{})
		register(t, r, registry.Batch{Tools: map[string]sdk.Tool{"wait": blocking}})
		q, _ := r.Prepare(registry.Application)
		ctx, cancel := context.WithCancelCause(t.Context())
		go func() { <-started; cancel(errors.New("user pressed stop")) }()
		s, err := q.Settle(ctx, registry.Call{Name: "wait"})
		if s != nil || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "user pressed stop") {
			t.Fatalf("settle = %v, %v; want an interruption carrying the cause", s, err)
		}
	})
	t.Run("ScopeCloseEndsExecution", func(t *testing.T) {
		r := hosttest.Registry(t, registry.Options{})
		started = make(chan struct{})
		sc := scope.New(context.Background())
		release := register(t, r, registry.Batch{Owner: sc, Tools: map[string]sdk.Tool{"wait": blocking}})
		sc.Defer(t.Context(), func(context.Context) error { release(); return nil })
		q, _ := r.Prepare(registry.Application)
		errc := make(chan error, 1)
		go func() {
			_, err := q.Settle(t.Context(), registry.Call{Name: "wait"})
			errc <- err
		}()
		<-started
		if err := sc.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		if !returned.Load() {
			t.Fatal("scope close returned before its tracked execution ended")
		}
		if err := <-errc; !errors.Is(err, context.Canceled) || !errors.Is(err, scope.ErrClosed) {
			t.Fatalf("err = %v, want an interruption caused by the scope's close", err)
		}
		if s := settle(t, q, "wait", `{}`); s.Outcome != registry.Unavailable {
			t.Fatalf("after close: %s, want unavailable", s.Outcome)
		}
	})
	t.Run("ScopeCloseEndsExecutionOwnerJoined", func(t *testing.T) {
		// The executor joins the owner itself (as plugins do); the registry still
		// settles the owner's close as an interruption, not the tool's failure.
		r := hosttest.Registry(t, registry.Options{})
		sc := scope.New(context.Background())
		joined := make(chan struct{})
		tool := sdk.NewTool("waits for its owner", func(ctx context.Context, _ sdk.Invocation, _ struct{}) (string, error) {
			if ctx.Done() != nil {
				return "", errors.New("the registry joined the call with its owner although the executor does")
			}
			close(joined)
			<-sc.Context().Done()
			return "", sdk.Failf("should never be shown")
		})
		release := register(t, r, registry.Batch{Owner: sc, OwnerJoined: true, Tools: map[string]sdk.Tool{"wait": tool}})
		sc.Defer(t.Context(), func(context.Context) error { release(); return nil })
		q, _ := r.Prepare(registry.Application)
		errc := make(chan error, 1)
		go func() {
			_, err := q.Settle(context.Background(), registry.Call{Name: "wait"})
			errc <- err
		}()
		select {
		case <-joined:
		case err := <-errc:
			t.Fatal(err)
		}
		if err := sc.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; !errors.Is(err, context.Canceled) || !errors.Is(err, scope.ErrClosed) {
			t.Fatalf("err = %v, want an interruption caused by the scope's close", err)
		}
	})
}

func TestHooks(t *testing.T) {
	r := hosttest.Registry(t, registry.Options{})
	hosttest.OpenLocation(t, r, "/ws")
	register(t, r, registry.Batch{Location: "/ws", Tools: map[string]sdk.Tool{"echo": constTool("x")}})
	var order []string
	var mu sync.Mutex
	hook := func(name string) registry.Hook {
		return func(_ context.Context, call registry.Call, s *registry.Settlement) (*registry.Settlement, error) {
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			s.Content = append(s.Content, sdk.Text("+"+name))
			return s, nil
		}
	}
	releaseLoc, _ := r.AddHook("/ws", hook("loc1"))
	r.AddHook(registry.Application, hook("app1"))
	r.AddHook("/ws", hook("loc2"))

	q, _ := r.Prepare("/ws")
	if got := settle(t, q, "echo", `{}`).Text(); got != "x+app1+loc1+loc2" {
		t.Fatalf("text = %q, want application hooks first, then the Location's in order", got)
	}
	if got := settle(t, q, "missing", `{}`); strings.Contains(got.Text(), "+") {
		t.Fatalf("hooks ran for an unknown tool: %q", got.Text())
	}
	releaseLoc()
	if got := settle(t, q, "echo", `{}`).Text(); got != "x+app1+loc2" {
		t.Fatalf("after release text = %q", got)
	}
	releaseLoc() // idempotent
	appQ, _ := r.Prepare(registry.Application)
	if got := settle(t, appQ, "echo", `{}`); strings.Contains(got.Text(), "+") {
		t.Fatalf("hooks ran for a tool unknown to the application placement: %q", got.Text())
	}

	t.Run("NotForUnavailable", func(t *testing.T) {
		release := register(t, r, registry.Batch{Location: "/ws", Tools: map[string]sdk.Tool{"gone": constTool("g")}})
		q, _ := r.Prepare("/ws")
		release()
		if got := settle(t, q, "gone", `{}`); got.Outcome != registry.Unavailable || strings.Contains(got.Text(), "+") {
			t.Fatalf("settlement = %s %q, want unavailable without hooks", got.Outcome, got.Text())
		}
	})
	t.Run("ForEveryResolvedOutcome", func(t *testing.T) {
		strict := sdk.NewTool("strict", func(_ context.Context, _ sdk.Invocation, in echoIn) (string, error) {
			if in.Text == "fail" {
				return "", sdk.Failf("no")
			}
			return in.Text, nil
		})
		register(t, r, registry.Batch{Location: "/ws", Tools: map[string]sdk.Tool{"strict": strict}})
		q, _ := r.Prepare("/ws")
		for input, want := range map[string]registry.Outcome{
			`{"text":"ok","count":1}`:   registry.Completed,
			`{"text":"fail","count":1}`: registry.ToolFailed,
			`{"count":"x"}`:             registry.InvalidInput,
		} {
			got := settle(t, q, "strict", input)
			if got.Outcome != want || !strings.HasSuffix(got.Text(), "+app1+loc2") {
				t.Fatalf("%s: settlement = %s %q, want %s with the after hooks", input, got.Outcome, got.Text(), want)
			}
		}
	})

	t.Run("HookErrorIsOperational", func(t *testing.T) {
		release, _ := r.AddHook("/ws", func(context.Context, registry.Call, *registry.Settlement) (*registry.Settlement, error) {
			return nil, errors.New("audit log unavailable")
		})
		defer release()
		_, err := q.Settle(t.Context(), registry.Call{Name: "echo"})
		var op *registry.OperationalError
		if !errors.As(err, &op) || op.Op != "hook" {
			t.Fatalf("err = %v, want an operational hook error", err)
		}
	})
}

func TestBeforeHooks(t *testing.T) {
	r := hosttest.Registry(t, registry.Options{})
	hosttest.OpenLocation(t, r, "/ws")
	var seen []string
	echo := sdk.NewTool("echo", func(_ context.Context, _ sdk.Invocation, in echoIn) (string, error) {
		seen = append(seen, in.Text)
		return in.Text, nil
	})
	register(t, r, registry.Batch{Location: "/ws", Tools: map[string]sdk.Tool{"echo": echo}})
	var afterInput string
	r.AddHook("/ws", func(_ context.Context, call registry.Call, s *registry.Settlement) (*registry.Settlement, error) {
		afterInput = string(call.Input)
		return s, nil
	})
	q, _ := r.Prepare("/ws")

	t.Run("ReplacedInputIsValidatedAndSeenByExecutorAndAfterHooks", func(t *testing.T) {
		var order []string
		rel1, _ := r.AddBeforeHook(registry.Application, func(_ context.Context, call registry.Call) (json.RawMessage, error) {
			order = append(order, "app:"+string(call.Input))
			return json.RawMessage(`{"text":"from-app","count":1}`), nil
		})
		defer rel1()
		rel2, _ := r.AddBeforeHook("/ws", func(_ context.Context, call registry.Call) (json.RawMessage, error) {
			order = append(order, "loc:"+string(call.Input))
			return json.RawMessage(`{"text":"from-loc","count":2}`), nil
		})
		defer rel2()
		s := settle(t, q, "echo", `{"text":"model","count":0}`)
		if s.Outcome != registry.Completed || s.Text() != "from-loc" {
			t.Fatalf("settlement = %s %q, want the last hook's input executed", s.Outcome, s.Text())
		}
		wantOrder := []string{`app:{"text":"model","count":0}`, `loc:{"text":"from-app","count":1}`}
		if !slices.Equal(order, wantOrder) {
			t.Fatalf("order = %q, want %q", order, wantOrder)
		}
		if afterInput != `{"text":"from-loc","count":2}` {
			t.Fatalf("after hook saw input %s", afterInput)
		}
	})
	t.Run("ReplacementFailingValidationIsInvalidInput", func(t *testing.T) {
		rel, _ := r.AddBeforeHook("/ws", func(context.Context, registry.Call) (json.RawMessage, error) {
			return json.RawMessage(`{"text":7}`), nil
		})
		defer rel()
		seen = nil
		if s := settle(t, q, "echo", `{"text":"ok","count":1}`); s.Outcome != registry.InvalidInput || len(seen) != 0 {
			t.Fatalf("settlement = %s, executor saw %q; want invalid input and no execution", s.Outcome, seen)
		}
	})
	t.Run("RefusalIsModelVisibleAndSkipsExecution", func(t *testing.T) {
		rel, _ := r.AddBeforeHook("/ws", func(context.Context, registry.Call) (json.RawMessage, error) {
			return nil, sdk.Failf("echo is disabled during the freeze")
		})
		defer rel()
		seen = nil
		s := settle(t, q, "echo", `{"text":"ok","count":1}`)
		if s.Outcome != registry.ToolFailed || s.Text() != "echo is disabled during the freeze" || len(seen) != 0 {
			t.Fatalf("settlement = %s %q, executor saw %q", s.Outcome, s.Text(), seen)
		}
	})
	t.Run("ErrorIsOperationalPanicIsDefect", func(t *testing.T) {
		rel, _ := r.AddBeforeHook("/ws", func(context.Context, registry.Call) (json.RawMessage, error) {
			return nil, errors.New("policy store down")
		})
		_, err := q.Settle(t.Context(), registry.Call{Name: "echo"})
		var op *registry.OperationalError
		if !errors.As(err, &op) || op.Op != "before hook" {
			t.Fatalf("err = %v, want an operational before-hook error", err)
		}
		rel()
		rel() // idempotent
		rel, _ = r.AddBeforeHook("/ws", func(context.Context, registry.Call) (json.RawMessage, error) { panic("boom") })
		defer rel()
		_, err = q.Settle(t.Context(), registry.Call{Name: "echo"})
		var defect *registry.DefectError
		if !errors.As(err, &defect) {
			t.Fatalf("err = %v, want a defect", err)
		}
	})
	t.Run("NotForUnknown", func(t *testing.T) {
		ran := false
		rel, _ := r.AddBeforeHook("/ws", func(_ context.Context, call registry.Call) (json.RawMessage, error) {
			ran = true
			return call.Input, nil
		})
		defer rel()
		if s := settle(t, q, "missing", `{}`); s.Outcome != registry.Unknown || ran {
			t.Fatalf("settlement = %s, before hook ran = %v", s.Outcome, ran)
		}
	})
}

func TestConcurrentUse(t *testing.T) {
	r := hosttest.Registry(t, registry.Options{})
	hosttest.OpenLocation(t, r, "/ws")
	register(t, r, registry.Batch{Tools: map[string]sdk.Tool{"stable": constTool("stable")}})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				loc := registry.Application
				if i%2 == 0 {
					loc = "/ws"
				}
				release, err := r.Register(registry.Batch{Location: loc, Tools: map[string]sdk.Tool{fmt.Sprintf("t%d", g): constTool("v")}})
				if err != nil {
					t.Error(err)
					return
				}
				q, _ := r.Prepare("/ws")
				s, err := q.Settle(context.Background(), registry.Call{Name: "stable"})
				if err != nil || s.Text() != "stable" {
					t.Errorf("settle = %v, %v", s, err)
					return
				}
				release()
			}
		})
	}
	wg.Wait()
	q, _ := r.Prepare("/ws")
	if len(q.Definitions()) != 1 {
		t.Fatalf("left behind: %v", q.Definitions())
	}
}

func TestPrepareOffer(t *testing.T) {
	r := hosttest.Registry(t, registry.Options{})
	hosttest.OpenLocation(t, r, "/ws")
	edit := func(action string) sdk.Tool {
		tool := constTool("edited")
		tool.PermissionAction = action
		return tool
	}
	register(t, r, registry.Batch{Location: "/ws", Tools: map[string]sdk.Tool{
		"edit": edit(""), "write": edit("edit"), "apply_patch": edit("edit"), "question": constTool("?"),
	}})
	names := func(q *registry.Request) (out []string) {
		for _, d := range q.Definitions() {
			out = append(out, d.Name)
		}
		return out
	}
	denyEdit := registry.Offer(func(_, action string) bool { return action != "edit" })

	t.Run("SharedActionHidesEveryToolDeclaringIt", func(t *testing.T) {
		q, err := r.Prepare("/ws", denyEdit)
		if err != nil {
			t.Fatal(err)
		}
		if got := names(q); !slices.Equal(got, []string{"question"}) {
			t.Fatalf("offered %q, want only question", got)
		}
		if s := settle(t, q, "write", `{}`); s.Outcome != registry.Unknown {
			t.Fatalf("hidden tool settled %s, want unknown", s.Outcome)
		}
	})
	t.Run("TheNameIsAnActionToo", func(t *testing.T) {
		q, _ := r.Prepare("/ws", registry.Offer(func(_, action string) bool { return action != "write" }))
		if got := names(q); !slices.Equal(got, []string{"apply_patch", "edit", "question"}) {
			t.Fatalf("offered %q", got)
		}
	})
	t.Run("OffersNarrowTogether", func(t *testing.T) {
		q, _ := r.Prepare("/ws", denyEdit, registry.Offer(func(_, action string) bool { return action != "question" }))
		if got := names(q); len(got) != 0 {
			t.Fatalf("offered %q, want nothing", got)
		}
	})
	t.Run("OfferAllOffersEverything", func(t *testing.T) {
		q, _ := r.Prepare("/ws", registry.OfferAll(), denyEdit)
		if got := names(q); len(got) != 4 {
			t.Fatalf("offered %q, want all four", got)
		}
	})
	t.Run("SameNarrowingSameRequest", func(t *testing.T) {
		all, _ := r.Prepare("/ws")
		q1, _ := r.Prepare("/ws", denyEdit)
		q2, _ := r.Prepare("/ws", registry.Offer(func(_, action string) bool { return action != "edit" }))
		if q1 != q2 {
			t.Fatal("the same narrowing of an unchanged placement made a new Request")
		}
		if q, _ := r.Prepare("/ws", registry.Offer(func(string, string) bool { return true })); q != all {
			t.Fatal("a narrowing that hides nothing made a new Request")
		}
	})
	t.Run("WithoutOptionsEverythingIsOffered", func(t *testing.T) {
		q, _ := r.Prepare("/ws")
		if got := names(q); len(got) != 4 {
			t.Fatalf("offered %q, want all four", got)
		}
		if s := settle(t, q, "write", `{}`); s.Outcome != registry.Completed {
			t.Fatalf("write settled %s", s.Outcome)
		}
	})
}
