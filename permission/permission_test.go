package permission_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/toolhost/toolhost/permission"
	"github.com/toolhost/toolhost/sdk"
)

func TestMain(m *testing.M) {
	if os.Getenv(saverEnv) != "" {
		runSaver()
		return
	}
	goleak.VerifyTestMain(m)
}

// askCall is one call of the fake Asker, answered by sending on reply.
type askCall struct {
	ctx   context.Context
	id    string
	req   permission.Request
	reply chan permission.Answer
	err   chan error
}

// fakeAsker hands every ask to the test through asks and waits for the test's
// answer, an error, or its context.
type fakeAsker struct {
	asks     chan askCall
	returned chan error // receives what each Ask returned as its error
}

func newFakeAsker() *fakeAsker {
	return &fakeAsker{asks: make(chan askCall, 16), returned: make(chan error, 16)}
}

func (a *fakeAsker) Ask(ctx context.Context, id string, req permission.Request) (permission.Answer, error) {
	c := askCall{ctx: ctx, id: id, req: req, reply: make(chan permission.Answer, 1), err: make(chan error, 1)}
	a.asks <- c
	select {
	case ans := <-c.reply:
		a.returned <- nil
		return ans, nil
	case err := <-c.err:
		a.returned <- err
		return permission.Answer{}, err
	case <-ctx.Done():
		a.returned <- ctx.Err()
		return permission.Answer{}, ctx.Err()
	}
}

func (a *fakeAsker) next(t *testing.T) askCall {
	t.Helper()
	return <-a.asks
}

// answerAsker answers every ask at once.
type answerAsker struct {
	mu    sync.Mutex
	ans   permission.Answer
	calls []permission.Request
}

func (a *answerAsker) Ask(_ context.Context, _ string, req permission.Request) (permission.Answer, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, req)
	return a.ans, nil
}

func (a *answerAsker) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.calls)
}

func newService(t *testing.T, opts permission.Options) *permission.Service {
	t.Helper()
	s, err := permission.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func rule(action, resource string, eff permission.Effect) permission.Rule {
	return permission.Rule{Action: action, Resource: resource, Effect: eff}
}

func req(session, action string, resources ...string) permission.Request {
	return permission.Request{
		SessionID: session,
		Agent:     "build",
		Source:    permission.Source{Type: "tool", Tool: action, MessageID: "msg_1", CallID: "call_" + action},
		Action:    action,
		Resources: resources,
	}
}

// assertAsync runs Assert in a goroutine; the returned channel yields its error.
func assertAsync(s *permission.Service, ctx context.Context, r permission.Request) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- s.Assert(ctx, r) }()
	return ch
}

func TestEvaluate(t *testing.T) {
	tests := []struct {
		name      string
		rules     []permission.Rule
		action    string
		resources []string
		want      permission.Effect
	}{
		{"NoRuleAsks", nil, "read", []string{"a"}, permission.Ask},
		{"MatchingRuleAllows", []permission.Rule{rule("read", "*", permission.Allow)}, "read", []string{"a"}, permission.Allow},
		{"LastMatchWins", []permission.Rule{
			rule("read", "*", permission.Allow),
			rule("read", "secret/*", permission.Deny),
		}, "read", []string{"secret/key"}, permission.Deny},
		{"LastMatchWinsOverAnEarlierDeny", []permission.Rule{
			rule("read", "secret/*", permission.Deny),
			rule("read", "*", permission.Allow),
		}, "read", []string{"secret/key"}, permission.Allow},
		{"LaterNonMatchingRuleIgnored", []permission.Rule{
			rule("read", "*", permission.Allow),
			rule("read", "other/*", permission.Deny),
		}, "read", []string{"secret/key"}, permission.Allow},
		{"ActionMustMatchToo", []permission.Rule{rule("write", "*", permission.Allow)}, "read", []string{"a"}, permission.Ask},
		{"ActionPattern", []permission.Rule{rule("*", "*", permission.Deny), rule("re?d", "*", permission.Allow)}, "read", []string{"a"}, permission.Allow},
		{"ExplicitAsk", []permission.Rule{rule("*", "*", permission.Allow), rule("bash", "*", permission.Ask)}, "bash", []string{"ls"}, permission.Ask},
		{"BareCommand", []permission.Rule{rule("bash", "git *", permission.Allow)}, "bash", []string{"git"}, permission.Allow},
		{"AnyDenyDenies", []permission.Rule{
			rule("read", "*", permission.Allow),
			rule("read", "b", permission.Deny),
			rule("read", "c", permission.Ask),
		}, "read", []string{"a", "c", "b"}, permission.Deny},
		{"AnyAskAsks", []permission.Rule{
			rule("read", "*", permission.Allow),
			rule("read", "c", permission.Ask),
		}, "read", []string{"a", "c"}, permission.Ask},
		{"UnmatchedResourceAsks", []permission.Rule{rule("read", "a", permission.Allow)}, "read", []string{"a", "z"}, permission.Ask},
		{"AllAllowAllows", []permission.Rule{rule("read", "*", permission.Allow)}, "read", []string{"a", "b"}, permission.Allow},
		{"NoResourcesMeansStar", []permission.Rule{rule("tool", "*", permission.Allow), rule("tool", "a", permission.Deny)}, "tool", nil, permission.Allow},
		{"NoResourcesDoesNotMatchSpecificRules", []permission.Rule{rule("tool", "a*", permission.Allow)}, "tool", nil, permission.Ask},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newService(t, permission.Options{Rules: tt.rules})
			if got := s.Evaluate(tt.action, tt.resources); got != tt.want {
				t.Errorf("Evaluate(%q, %q) = %q, want %q", tt.action, tt.resources, got, tt.want)
			}
		})
	}
}

func TestNewRefusesBadRules(t *testing.T) {
	for name, r := range map[string]permission.Rule{
		"EmptyAction":   rule("", "*", permission.Allow),
		"EmptyResource": rule("read", "", permission.Allow),
		"UnknownEffect": rule("read", "*", "permit"),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := permission.New(permission.Options{Rules: []permission.Rule{rule("x", "*", permission.Allow), r}})
			if err == nil || !strings.Contains(err.Error(), "rule 1") {
				t.Fatalf("New = %v, want an error naming rule 1", err)
			}
		})
	}
}

func TestAssertAllowedAsksNobody(t *testing.T) {
	asker := &answerAsker{ans: permission.Answer{Reply: permission.Reject}}
	s := newService(t, permission.Options{Rules: []permission.Rule{rule("read", "*", permission.Allow)}, Asker: asker})
	if err := s.Assert(t.Context(), req("s1", "read", "a.txt")); err != nil {
		t.Fatal(err)
	}
	if asker.count() != 0 {
		t.Fatal("asker was called for an allowed request")
	}
}

func TestAssertDeniedByRule(t *testing.T) {
	asker := &answerAsker{ans: permission.Answer{Reply: permission.Once}}
	s := newService(t, permission.Options{
		Rules:      []permission.Rule{rule("read", "*", permission.Allow), rule("read", "secret/*", permission.Deny)},
		Asker:      asker,
		ConfigHint: "/w/.toolhost/config.json",
	})
	err := s.Assert(t.Context(), req("s1", "read", "ok.txt", "secret/key.pem"))
	var failure *sdk.ToolFailure
	if !errors.As(err, &failure) || !errors.Is(err, permission.ErrDenied) {
		t.Fatalf("Assert = %v, want a ToolFailure wrapping ErrDenied", err)
	}
	checkDenial(t, err, []string{`"read"`, `"secret/key.pem"`},
		[]string{"/w/.toolhost/config.json", `{"action":"read","resource":"secret/key.pem","effect":"allow"}`})
	if strings.Contains(failure.Message, "ok.txt") {
		t.Errorf("message %q names an allowed resource", failure.Message)
	}
	if errors.Is(err, context.Canceled) {
		t.Error("a deny must not look like an interruption")
	}
	if asker.count() != 0 {
		t.Fatal("asker was called for a denied request")
	}
}

func TestAssertWithNobodyToAskDenies(t *testing.T) {
	s := newService(t, permission.Options{ConfigHint: "cfg.json"})
	err := s.Assert(t.Context(), req("s1", "grep", "src"))
	var failure *sdk.ToolFailure
	if !errors.As(err, &failure) || !errors.Is(err, permission.ErrDenied) {
		t.Fatalf("Assert = %v, want a ToolFailure wrapping ErrDenied", err)
	}
	checkDenial(t, err, []string{`"grep"`, `"src"`, "no one to ask"},
		[]string{"cfg.json", `{"action":"grep","resource":"src","effect":"allow"}`})
	if len(s.Pending()) != 0 {
		t.Fatal("an ask was left pending")
	}
}

// checkDenial checks that err is a denial whose model-visible message holds every
// one of model and nothing of hint (no config path, no rule), and whose
// *DeniedError's Hint, for the runner and the person, holds every one of hint.
func checkDenial(t *testing.T, err error, model, hint []string) {
	t.Helper()
	var failure *sdk.ToolFailure
	var denied *permission.DeniedError
	if !errors.As(err, &failure) || !errors.As(err, &denied) || !errors.Is(err, permission.ErrDenied) {
		t.Fatalf("Assert = %v, want a ToolFailure whose Err is a *DeniedError", err)
	}
	for _, want := range model {
		if !strings.Contains(failure.Message, want) {
			t.Errorf("model-visible message %q lacks %q", failure.Message, want)
		}
	}
	for _, want := range hint {
		if strings.Contains(failure.Message, want) {
			t.Errorf("model-visible message %q tells the model %q", failure.Message, want)
		}
		if !strings.Contains(denied.Hint(), want) {
			t.Errorf("hint %q lacks %q", denied.Hint(), want)
		}
	}
	for _, never := range []string{"config", "rule", `"effect"`, "{"} {
		if strings.Contains(failure.Message, never) {
			t.Errorf("model-visible message %q mentions %q", failure.Message, never)
		}
	}
}

func TestAskOnce(t *testing.T) {
	asker := newFakeAsker()
	s := newService(t, permission.Options{Asker: asker})
	r := req("s1", "read", "a.txt")
	r.Save = []string{"*"}
	r.Metadata = map[string]any{"root": "/w"}
	done := assertAsync(s, t.Context(), r)
	call := asker.next(t)
	if !reflect.DeepEqual(call.req, r) {
		t.Errorf("asker got %+v, want %+v", call.req, r)
	}
	if p := s.Pending(); len(p) != 1 || p[0].ID != call.id || !reflect.DeepEqual(p[0].Request, r) {
		t.Errorf("Pending = %+v, want the one ask %q", p, call.id)
	}
	call.reply <- permission.Answer{Reply: permission.Once}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(s.Pending()) != 0 {
		t.Error("ask still pending after its answer")
	}
	if got := s.Evaluate("read", []string{"a.txt"}); got != permission.Ask {
		t.Errorf("after once, Evaluate = %q, want ask", got)
	}
}

func TestAskAlwaysPersistsAndSurvivesRestart(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state", "approvals.json")
	asker := newFakeAsker()
	s := newService(t, permission.Options{Asker: asker, StateFile: state})
	r := req("s1", "read", "src/a.go")
	r.Save = []string{"src/*"}
	done := assertAsync(s, t.Context(), r)
	asker.next(t).reply <- permission.Answer{Reply: permission.Always}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := s.Evaluate("read", []string{"src/deep/b.go"}); got != permission.Allow {
		t.Errorf("after always, Evaluate = %q, want allow", got)
	}
	if got := s.Evaluate("grep", []string{"src/deep/b.go"}); got != permission.Ask {
		t.Errorf("always for read allowed grep: %q", got)
	}

	fi, err := os.Stat(state)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("state file mode %v, want 0600", fi.Mode().Perm())
	}
	entries, _ := os.ReadDir(filepath.Dir(state))
	for _, e := range entries {
		if e.Name() != "approvals.json" && e.Name() != ".approvals.json.lock" {
			t.Errorf("state dir holds %s, want only the state file and its lock (no temp files)", e.Name())
		}
	}

	s.Close()
	restarted := newService(t, permission.Options{StateFile: state})
	if got := restarted.Evaluate("read", []string{"src/x.go"}); got != permission.Allow {
		t.Errorf("after restart, Evaluate = %q, want allow", got)
	}
	if err := restarted.Assert(t.Context(), req("s2", "read", "src/x.go")); err != nil {
		t.Errorf("after restart, Assert = %v", err)
	}
}

func TestConfiguredDenyBeatsSavedApproval(t *testing.T) {
	state := filepath.Join(t.TempDir(), "approvals.json")
	writeFile(t, state, `{"version": 1, "approvals": [{"action": "read", "resource": "*"}]}`)
	s := newService(t, permission.Options{
		StateFile: state,
		Rules: []permission.Rule{
			rule("read", "secret/*", permission.Deny),
			rule("read", "asked/*", permission.Ask),
		},
	})
	if got := s.Evaluate("read", []string{"secret/key"}); got != permission.Deny {
		t.Errorf("Evaluate(secret) = %q, want deny", got)
	}
	if got := s.Evaluate("read", []string{"asked/x"}); got != permission.Allow {
		t.Errorf("Evaluate(asked) = %q, want allow: a saved approval answers a configured ask", got)
	}
	if got := s.Evaluate("read", []string{"other"}); got != permission.Allow {
		t.Errorf("Evaluate(other) = %q, want allow", got)
	}
	if err := s.Assert(t.Context(), req("s1", "read", "secret/key")); !errors.Is(err, permission.ErrDenied) {
		t.Errorf("Assert(secret) = %v, want denied", err)
	}
}

func TestAlwaysResolvesEveryPendingAskItCovers(t *testing.T) {
	asker := newFakeAsker()
	s := newService(t, permission.Options{Asker: asker})
	first := req("s1", "read", "src/a.go")
	first.Save = []string{"src/*"}
	d1 := assertAsync(s, t.Context(), first)
	c1 := asker.next(t)
	d2 := assertAsync(s, t.Context(), req("s1", "read", "src/b.go")) // covered
	c2 := asker.next(t)
	d3 := assertAsync(s, t.Context(), req("s1", "read", "docs/c.md")) // not covered
	c3 := asker.next(t)
	d4 := assertAsync(s, t.Context(), req("s2", "read", "src/d.go")) // covered, another session
	c4 := asker.next(t)
	d5 := assertAsync(s, t.Context(), req("s2", "grep", "src/e.go")) // another action
	c5 := asker.next(t)

	c1.reply <- permission.Answer{Reply: permission.Always}
	if err := <-d1; err != nil {
		t.Fatal(err)
	}
	for name, covered := range map[string]struct {
		done <-chan error
		call askCall
	}{"of the session": {d2, c2}, "of another session": {d4, c4}} {
		if err := <-covered.done; err != nil {
			t.Fatalf("covered ask %s: %v", name, err)
		}
		if context.Cause(covered.call.ctx) == nil {
			t.Errorf("the covered ask %s: its Asker context was not cancelled", name)
		}
	}
	ids := pendingIDs(s)
	if want := []string{c3.id, c5.id}; !reflect.DeepEqual(ids, want) {
		t.Fatalf("pending = %v, want %v (another resource, another action)", ids, want)
	}
	c3.reply <- permission.Answer{Reply: permission.Once}
	c5.reply <- permission.Answer{Reply: permission.Once}
	for _, d := range []<-chan error{d3, d5} {
		if err := <-d; err != nil {
			t.Fatal(err)
		}
	}
}

func TestRejectWithoutMessageDeclinesTheSession(t *testing.T) {
	asker := newFakeAsker()
	s := newService(t, permission.Options{Asker: asker})
	d1 := assertAsync(s, t.Context(), req("s1", "read", "a"))
	c1 := asker.next(t)
	d2 := assertAsync(s, t.Context(), req("s1", "grep", "b"))
	asker.next(t)
	d3 := assertAsync(s, t.Context(), req("s2", "read", "c"))
	c3 := asker.next(t)

	c1.reply <- permission.Answer{Reply: permission.Reject}
	for i, d := range []<-chan error{d1, d2} {
		err := <-d
		var failure *sdk.ToolFailure
		var declined *permission.DeclinedError
		if !errors.Is(err, context.Canceled) || !errors.Is(err, permission.ErrDeclined) || !errors.Is(err, sdk.ErrDeclined) || errors.As(err, &failure) || !errors.As(err, &declined) {
			t.Errorf("ask %d: Assert = %v, want a decline (context.Canceled, ErrDeclined, sdk.ErrDeclined, no ToolFailure)", i+1, err)
		}
	}
	if ids := pendingIDs(s); !reflect.DeepEqual(ids, []string{c3.id}) {
		t.Fatalf("pending = %v, want only the other session's %s", ids, c3.id)
	}
	c3.reply <- permission.Answer{Reply: permission.Once}
	if err := <-d3; err != nil {
		t.Fatal(err)
	}
}

func TestRejectWithMessageIsModelVisibleFeedback(t *testing.T) {
	asker := newFakeAsker()
	s := newService(t, permission.Options{Asker: asker})
	d1 := assertAsync(s, t.Context(), req("s1", "read", "a"))
	c1 := asker.next(t)
	d2 := assertAsync(s, t.Context(), req("s1", "list", "b"))
	asker.next(t)

	c1.reply <- permission.Answer{Reply: permission.Reject, Message: "use the docs folder instead"}
	for i, d := range []<-chan error{d1, d2} {
		err := <-d
		var failure *sdk.ToolFailure
		if !errors.As(err, &failure) || !errors.Is(err, permission.ErrRejected) || errors.Is(err, context.Canceled) {
			t.Fatalf("ask %d: Assert = %v, want a ToolFailure wrapping ErrRejected", i+1, err)
		}
		if !strings.Contains(failure.Message, "use the docs folder instead") {
			t.Errorf("ask %d: message %q lacks the feedback", i+1, failure.Message)
		}
	}
	if len(s.Pending()) != 0 {
		t.Fatal("asks left pending")
	}
}

func TestReplyOutOfBand(t *testing.T) {
	asker := newFakeAsker()
	s := newService(t, permission.Options{Asker: asker})
	done := assertAsync(s, t.Context(), req("s1", "read", "a"))
	call := asker.next(t)
	if err := s.Reply(call.id, permission.Answer{Reply: "maybe"}); err == nil {
		t.Fatal("Reply accepted an invalid reply")
	}
	if len(s.Pending()) != 1 {
		t.Fatal("an invalid reply resolved the ask")
	}
	if err := s.Reply(call.id, permission.Answer{Reply: permission.Once}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := <-asker.returned; !errors.Is(err, context.Canceled) {
		t.Errorf("Asker returned %v, want its context cancelled", err)
	}
	if err := s.Reply(call.id, permission.Answer{Reply: permission.Once}); !errors.Is(err, permission.ErrUnknownAsk) {
		t.Errorf("second Reply = %v, want ErrUnknownAsk", err)
	}
	if err := s.Reply("ask_nope", permission.Answer{Reply: permission.Once}); !errors.Is(err, permission.ErrUnknownAsk) {
		t.Errorf("Reply(unknown) = %v, want ErrUnknownAsk", err)
	}
}

func TestAskerErrorIsNotAToolFailure(t *testing.T) {
	asker := newFakeAsker()
	s := newService(t, permission.Options{Asker: asker})
	done := assertAsync(s, t.Context(), req("s1", "read", "a"))
	boom := errors.New("terminal gone")
	asker.next(t).err <- boom
	err := <-done
	var failure *sdk.ToolFailure
	if !errors.Is(err, boom) || errors.As(err, &failure) {
		t.Fatalf("Assert = %v, want the asker's error, not a ToolFailure", err)
	}
	if len(s.Pending()) != 0 {
		t.Fatal("ask left pending")
	}
}

func TestCancelWhileAskingReturnsTheCause(t *testing.T) {
	asker := newFakeAsker()
	s := newService(t, permission.Options{Asker: asker})
	ctx, cancel := context.WithCancelCause(t.Context())
	done := assertAsync(s, ctx, req("s1", "read", "a"))
	asker.next(t)
	stop := errors.New("runner cancelled the turn")
	cancel(stop)
	if err := <-done; !errors.Is(err, stop) {
		t.Fatalf("Assert = %v, want the context's cause", err)
	}
	if len(s.Pending()) != 0 {
		t.Fatal("ask left pending")
	}
}

func TestEndSessionDeclinesItsAsks(t *testing.T) {
	asker := newFakeAsker()
	s := newService(t, permission.Options{Asker: asker})
	d1 := assertAsync(s, t.Context(), req("gone", "read", "a"))
	asker.next(t)
	d2 := assertAsync(s, t.Context(), req("alive", "read", "b"))
	c2 := asker.next(t)
	s.EndSession("gone")
	if err := <-d1; !errors.Is(err, permission.ErrDeclined) || !errors.Is(err, context.Canceled) || !errors.Is(err, sdk.ErrDeclined) {
		t.Fatalf("Assert = %v, want declined", err)
	}
	if ids := pendingIDs(s); !reflect.DeepEqual(ids, []string{c2.id}) {
		t.Fatalf("pending = %v, want %s", ids, c2.id)
	}
	c2.reply <- permission.Answer{Reply: permission.Once}
	if err := <-d2; err != nil {
		t.Fatal(err)
	}
}

func TestCloseDeclinesPendingAndLaterAsks(t *testing.T) {
	asker := newFakeAsker()
	s := newService(t, permission.Options{Asker: asker, Rules: []permission.Rule{rule("list", "*", permission.Allow)}})
	d1 := assertAsync(s, t.Context(), req("s1", "read", "a"))
	asker.next(t)
	d2 := assertAsync(s, t.Context(), req("s2", "read", "b"))
	asker.next(t)
	s.Close()
	s.Close() // idempotent
	for _, d := range []<-chan error{d1, d2} {
		if err := <-d; !errors.Is(err, permission.ErrDeclined) || !errors.Is(err, context.Canceled) || !errors.Is(err, sdk.ErrDeclined) {
			t.Fatalf("Assert = %v, want declined", err)
		}
	}
	if err := s.Assert(t.Context(), req("s1", "read", "c")); !errors.Is(err, permission.ErrDeclined) {
		t.Fatalf("Assert after Close = %v, want declined", err)
	}
	select {
	case c := <-asker.asks:
		t.Fatalf("asker called after Close: %+v", c.req)
	default:
	}
	if err := s.Assert(t.Context(), req("s1", "list", "c")); err != nil {
		t.Fatalf("an allowed request after Close: %v", err)
	}
}

func TestCorruptStateFileIsAnError(t *testing.T) {
	tests := map[string]string{
		"Empty":            "",
		"BadJSON":          `{"version": 1, "approvals": [{"action": "read", "resource": "*"}`,
		"Syntax":           "{\n  \"version\": 1,\n  \"approvals\": [}\n",
		"TrailingData":     `{"version": 1, "approvals": []} {}`,
		"UnknownField":     `{"version": 1, "approvals": [], "extra": true}`,
		"UnknownApprField": `{"version": 1, "approvals": [{"action": "read", "resource": "*", "effect": "deny"}]}`,
		"WrongVersion":     `{"version": 2, "approvals": []}`,
		"NoVersion":        `{"approvals": []}`,
		"NoApprovals":      `{"version": 1}`,
		"EmptyAction":      `{"version": 1, "approvals": [{"action": "read", "resource": "*"}, {"action": "", "resource": "*"}]}`,
		"WrongType":        `{"version": 1, "approvals": [{"action": 3, "resource": "*"}]}`,
		"NotAnObject":      `[]`,
	}
	for name, content := range tests {
		t.Run(name, func(t *testing.T) {
			state := filepath.Join(t.TempDir(), "approvals.json")
			writeFile(t, state, content)
			s, err := permission.New(permission.Options{StateFile: state})
			var se *permission.StateError
			if s != nil || !errors.As(err, &se) || se.File != state || !strings.Contains(err.Error(), state) {
				t.Fatalf("New = %v, %v; want a *StateError naming %s", s, err, state)
			}
			t.Log(err)
			if got, _ := os.ReadFile(state); string(got) != content {
				t.Error("the corrupt file was modified")
			}
		})
	}
	t.Run("ErrorSaysWhere", func(t *testing.T) {
		state := filepath.Join(t.TempDir(), "approvals.json")
		writeFile(t, state, tests["Syntax"])
		_, err := permission.New(permission.Options{StateFile: state})
		if err == nil || !strings.Contains(err.Error(), "line 3") {
			t.Fatalf("New = %v, want the line of the error", err)
		}
		writeFile(t, state, tests["EmptyAction"])
		_, err = permission.New(permission.Options{StateFile: state})
		if err == nil || !strings.Contains(err.Error(), "/approvals/1/action") {
			t.Fatalf("New = %v, want the path of the bad approval", err)
		}
	})
}

func TestSaveFailureGrantsNothingAndReportsIt(t *testing.T) {
	blocker := filepath.Join(t.TempDir(), "state")
	state := filepath.Join(blocker, "approvals.json")
	asker := &answerAsker{ans: permission.Answer{Reply: permission.Always}}
	s := newService(t, permission.Options{Asker: asker, StateFile: state})
	writeFile(t, blocker, "the state file's directory cannot be made now")
	r := req("s1", "read", "a")
	r.Save = []string{"*"}
	err := s.Assert(t.Context(), r)
	var se *permission.StateError
	var failure *sdk.ToolFailure
	if !errors.As(err, &se) || errors.As(err, &failure) {
		t.Fatalf("Assert = %v, want a *StateError", err)
	}
	if got := s.Evaluate("read", []string{"a"}); got != permission.Ask {
		t.Errorf("after a failed save, Evaluate = %q, want ask", got)
	}
}

func TestAlwaysWithoutSavePatternsIsOnce(t *testing.T) {
	asker := &answerAsker{ans: permission.Answer{Reply: permission.Always}}
	s := newService(t, permission.Options{Asker: asker})
	if err := s.Assert(t.Context(), req("s1", "read", "a")); err != nil {
		t.Fatal(err)
	}
	if got := s.Evaluate("read", []string{"a"}); got != permission.Ask {
		t.Errorf("Evaluate = %q, want ask", got)
	}
}

func TestInvalidAnswerFromAsker(t *testing.T) {
	s := newService(t, permission.Options{Asker: &answerAsker{ans: permission.Answer{Reply: "yes"}}})
	err := s.Assert(t.Context(), req("s1", "read", "a"))
	var failure *sdk.ToolFailure
	if err == nil || errors.As(err, &failure) {
		t.Fatalf("Assert = %v, want an operational error", err)
	}
}

func TestConcurrentAsserts(t *testing.T) {
	state := filepath.Join(t.TempDir(), "approvals.json")
	s := newService(t, permission.Options{Asker: &answerAsker{ans: permission.Answer{Reply: permission.Always}}, StateFile: state})
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			r := req("s", "read", "dir"+string(rune('a'+i))+"/f")
			r.Save = []string{"dir" + string(rune('a'+i)) + "/*"}
			if err := s.Assert(context.Background(), r); err != nil {
				t.Error(err)
			}
			s.Pending()
			s.Evaluate("read", []string{"x"})
		})
	}
	wg.Wait()
	data, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct{ Approvals []json.RawMessage }
	if err := json.Unmarshal(data, &doc); err != nil || len(doc.Approvals) != 16 {
		t.Fatalf("saved %d approvals (%v), want 16", len(doc.Approvals), err)
	}
}

func pendingIDs(s *permission.Service) []string {
	var ids []string
	for _, p := range s.Pending() {
		ids = append(ids, p.ID)
	}
	return ids
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
