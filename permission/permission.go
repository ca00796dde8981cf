package permission

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/toolhost/toolhost/internal/filestore"
	"github.com/toolhost/toolhost/tool"
)

// Effect is what a rule decides for a request.
type Effect string

// The effects of a rule, and the results of [Service.Evaluate].
const (
	Allow Effect = "allow"
	Deny  Effect = "deny"
	Ask   Effect = "ask"
)

// Rule is one configured {action, resource, effect} rule. Action and Resource are
// wildcard patterns (see [Match]) and must be non-empty.
type Rule struct {
	Action   string
	Resource string
	Effect   Effect
	// Source, if set, is a wildcard pattern the rule applies to only: it matches the
	// request's Source.ToolSource ("builtin", "plugin:NAME", "mcp:NAME",
	// "manifest:NAME"). "" applies the rule to every request.
	Source string
}

// Source identifies what asked.
type Source struct {
	// Type is the kind of asker; "tool" for a tool call.
	Type string `json:"type"`
	// Tool is the name of the tool that asks.
	Tool string `json:"tool"`
	// MessageID and CallID are the Invocation's AssistantMessageID and ToolCallID.
	MessageID string `json:"message_id"`
	CallID    string `json:"call_id"`
	// ToolSource names the tool's source as the host knows it (never as the tool
	// claims it): "builtin", "plugin:NAME", "mcp:NAME" or "manifest:NAME"; "" when
	// unknown. Rules with a Source apply only to matching ones, and an "always"
	// answer saves its approval for this source only.
	ToolSource string `json:"tool_source,omitempty"`
}

// Request is one permission request, formulated by the tool that needs it.
type Request struct {
	// SessionID and Agent come from the call's Invocation.
	SessionID string `json:"session_id"`
	Agent     string `json:"agent"`
	Source    Source `json:"source"`
	// Action is what is to be done; by convention the tool's name.
	Action string `json:"action"`
	// Resources are what the action touches, such as root-relative paths. Each is
	// evaluated separately (any deny denies; else any ask asks). An empty list is
	// evaluated as the single resource "*", the whole tool.
	Resources []string `json:"resources"`
	// Save are the patterns persisted as allow rules for Action when the person
	// answers "always". With none, "always" allows this request only, like "once".
	Save []string `json:"save,omitempty"`
	// Metadata is shown to the person; it does not affect the decision.
	Metadata map[string]any `json:"metadata,omitempty"`
}

// Reply is a person's answer to an ask.
type Reply string

// The replies a person can give.
const (
	// Once allows this request only.
	Once Reply = "once"
	// Always allows this request and saves its Save patterns as allow rules for the
	// Location; every other pending request of the Location that they now allow,
	// whichever session made it, is allowed too.
	Always Reply = "always"
	// Reject refuses this request and every other pending request of its session.
	Reject Reply = "reject"
)

// Answer is a person's reply, with an optional message. A message only matters with
// Reject: the model sees it as feedback.
type Answer struct {
	Reply   Reply  `json:"reply"`
	Message string `json:"message,omitempty"`
}

// Asker reaches a person. Runners implement it: the serve API streams asks, the CLI
// prompts on a terminal. Ask blocks until the person answers or ctx ends, and must
// return promptly when ctx ends (the service cancels ctx when the ask is answered
// some other way, such as [Service.Reply], [Service.EndSession] or [Service.Close]).
// It may be called from many goroutines at once.
type Asker interface {
	Ask(ctx context.Context, id string, req Request) (Answer, error)
}

// Options configure a Service.
type Options struct {
	// Rules are the Location's configured rules, in order; the last match wins.
	Rules []Rule
	// StateFile is where "always" approvals persist for this Location (JSON); ""
	// keeps them in memory only.
	StateFile string
	// Asker reaches a person; nil means nobody can be asked, so asks are denied.
	Asker Asker
	// ConfigHint names where rules are configured (such as the config file's path);
	// the hint of a deny (see [DeniedError]) uses it to say how to allow a request.
	ConfigHint string
	// Observe, if set, is told of every decision Assert makes, as Assert returns
	// (traces, metrics, an audit trail). It is called from Assert's goroutine,
	// for many requests at once, and must not block or modify the Decision.
	Observe func(ctx context.Context, d Decision)
}

// Decision is what Assert decided for one request, and how.
type Decision struct {
	// Request is the request Assert was given.
	Request Request
	// Effect is the policy's effect before anyone was asked: Allow, Deny or Ask.
	Effect Effect
	// Rule is the index in Options.Rules of the configured rule that decided (for
	// the first resource that had Effect), or -1 when no rule matched it (then the
	// default, Ask, or a saved approval decided).
	Rule int
	// Approved reports that a saved approval turned Ask into Allow.
	Approved bool
	// Asked reports that a person was asked. Reply is their answer, "" when the ask
	// ended without one (the call's context ended, the asker failed, the session
	// ended, another answer settled it); Saved, that an "always" answer saved an
	// approval.
	Asked bool
	Reply Reply
	Saved bool
	// Allowed reports that Assert returned nil.
	Allowed bool
	// Start is when Assert began; Waited is how long the ask waited (0 when nobody
	// was asked).
	Start  time.Time
	Waited time.Duration
}

// PendingAsk is an ask waiting for an answer.
type PendingAsk struct {
	ID      string  `json:"id"`
	Request Request `json:"request"`
}

// Service evaluates one Location's policy and manages its approvals and asks. It is
// safe for concurrent use. Close it when the Location closes.
type Service struct {
	rules   []Rule
	file    string
	asker   Asker
	hint    string
	observe func(context.Context, Decision)

	// saveMu serializes writers of saved (and of the state file); readers use mu.
	saveMu sync.Mutex

	mu      sync.Mutex
	saved   []approval
	info    fs.FileInfo // the state file as saved was read from it; nil: none
	pending map[string]*pending
	seq     uint64
	closed  bool
}

// pending is one registered ask. It is resolved exactly once: the resolver claims it
// (removing it from Service.pending under mu), then sets err and closes done.
type pending struct {
	id     string
	seq    uint64
	req    Request
	cancel context.CancelCauseFunc // ends the Asker's context
	done   chan struct{}
	err    error
	reply  Reply // the answer that resolved it, if one did
}

// errAnswered is the cause given to an Asker's context when its ask was resolved
// some other way.
var errAnswered = errors.New("permission: ask answered elsewhere")

// New returns a Service for one Location. It validates the rules and loads the saved
// approvals from opts.StateFile; a file that is unreadable or corrupt is a
// *StateError naming the file and what is wrong, and no Service. A missing file
// holds no approvals.
func New(opts Options) (*Service, error) {
	if err := checkRules(opts.Rules); err != nil {
		return nil, err
	}
	s := &Service{
		rules:   slices.Clone(opts.Rules),
		file:    opts.StateFile,
		asker:   opts.Asker,
		hint:    opts.ConfigHint,
		observe: opts.Observe,
		pending: map[string]*pending{},
	}
	if s.file != "" {
		if _, err := filestore.Clean(s.file); err != nil {
			return nil, &StateError{File: s.file, Op: "load", Err: err}
		}
		s.mu.Lock()
		err := s.refreshLocked()
		s.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	return s, nil
}

func checkRules(rules []Rule) error {
	for i, r := range rules {
		if r.Action == "" || r.Resource == "" {
			return fmt.Errorf("permission: rule %d: action and resource must be non-empty", i)
		}
		switch r.Effect {
		case Allow, Deny, Ask:
		default:
			return fmt.Errorf("permission: rule %d: unknown effect %q (want allow, deny or ask)", i, r.Effect)
		}
	}
	return nil
}

// SetRules replaces the configured rules (a reloaded config): every evaluation
// that starts after it returns uses them; the saved approvals stay. Invalid rules
// are refused as New refuses them, and the rules in force stay. Safe for
// concurrent use.
func (s *Service) SetRules(rules []Rule) error {
	if err := checkRules(rules); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rules = slices.Clone(rules)
	return nil
}

// refreshLocked re-reads the state file when it changed since it was last read
// (another process saved an approval): a stat per call, a read only on change.
// Evaluation calls it only when the result would otherwise be Ask, the only one a
// saved approval changes. s.mu is held.
func (s *Service) refreshLocked() error {
	if s.file == "" {
		return nil
	}
	fi, err := os.Stat(s.file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		s.saved, s.info = nil, nil
		return nil
	case err != nil:
		return &StateError{File: s.file, Op: "load", Err: err}
	case s.info != nil && os.SameFile(fi, s.info) && fi.ModTime().Equal(s.info.ModTime()) && fi.Size() == s.info.Size():
		return nil
	}
	saved, err := loadState(s.file)
	if err != nil {
		return err
	}
	s.saved, s.info = saved, fi
	return nil
}

// Evaluate returns the policy's effect for action on resources, from the configured
// rules and the saved approvals, without asking anyone. For each resource the last
// matching configured rule decides (no match: Ask), except that a saved approval
// turns Ask into Allow; a configured Deny always wins. Across resources: any Deny
// denies, else any Ask asks, else Allow. An empty resources list is evaluated as
// ["*"]. It is safe for concurrent use.
func (s *Service) Evaluate(action string, resources []string) Effect {
	s.mu.Lock()
	defer s.mu.Unlock()
	eff, _ := s.evaluateLocked("", action, resources)
	if eff == Ask && s.refreshLocked() == nil {
		eff, _ = s.evaluateLocked("", action, resources)
	}
	return eff
}

// evaluateLocked returns the combined effect and each resource's effect.
func (s *Service) evaluateLocked(source, action string, resources []string) (Effect, []Effect) {
	if len(resources) == 0 {
		resources = []string{"*"}
	}
	each := make([]Effect, len(resources))
	combined := Allow
	for i, res := range resources {
		each[i] = s.effectOf(source, action, res)
		switch {
		case each[i] == Deny:
			combined = Deny
		case each[i] == Ask && combined == Allow:
			combined = Ask
		}
	}
	return combined, each
}

// Assert returns nil when req is allowed, asking a person when the policy says ask.
//
// It returns a *tool.Failure (model-visible) when a rule denies req or nobody can
// be asked (its Err a *DeniedError matching ErrDenied: the message says only what
// was denied, the error's Hint how to allow it), or when the person rejects with a
// message (wrapping ErrRejected and carrying the message). It returns a
// *DeclinedError (errors.Is context.Canceled, ErrDeclined and tool.ErrDeclined) when the person rejects without a message, another request of the
// session was rejected, the session ended, or the Service is closed. When ctx ends
// while asking it returns context.Cause(ctx); when the Asker fails, its error
// wrapped; when saving an "always" answer fails, a *StateError (the approval is not
// applied).
//
// An ask is registered (see Pending) for as long as it waits; the Asker's answer or
// one given through Reply, whichever comes first, resolves it. Assert blocks until
// then and until the Asker has returned. It is safe for concurrent use.
func (s *Service) Assert(ctx context.Context, req Request) error {
	if req.Action == "" {
		return errors.New("permission: request has no action")
	}
	if s.observe == nil {
		return s.assert(ctx, req, nil)
	}
	d := Decision{Request: req, Rule: -1, Start: time.Now()}
	err := s.assert(ctx, req, &d)
	d.Allowed = err == nil
	d.Saved = d.Asked && d.Reply == Always && err == nil
	s.observe(ctx, d)
	return err
}

// assert is Assert, filling in d (when not nil) as it decides.
func (s *Service) assert(ctx context.Context, req Request, d *Decision) error {
	s.mu.Lock()
	eff, each := s.evaluateLocked(req.Source.ToolSource, req.Action, req.Resources)
	if eff == Ask && s.refreshLocked() == nil { // another process may have saved an approval
		eff, each = s.evaluateLocked(req.Source.ToolSource, req.Action, req.Resources)
	}
	if d != nil {
		d.Effect = eff
		d.Rule, d.Approved = s.deciderLocked(req, each, eff)
	}
	switch {
	case eff == Allow:
		s.mu.Unlock()
		return nil
	case eff == Deny:
		s.mu.Unlock()
		return s.denied(req, each, Deny)
	case s.closed:
		s.mu.Unlock()
		return &DeclinedError{Action: req.Action, Reason: "the location is closed"}
	case s.asker == nil:
		s.mu.Unlock()
		return s.denied(req, each, Ask)
	}
	askCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	p := &pending{req: cloneRequest(req), cancel: cancel, done: make(chan struct{})}
	s.seq++
	p.seq = s.seq
	for p.id == "" || s.pending[p.id] != nil {
		p.id = "ask_" + rand.Text()
	}
	s.pending[p.id] = p
	s.mu.Unlock()

	if d != nil {
		defer func() { d.Asked, d.Reply, d.Waited = true, p.reply, time.Since(d.Start) }()
	}
	ans, err := s.asker.Ask(askCtx, p.id, cloneRequest(req))
	switch {
	case err != nil && ctx.Err() != nil:
		s.fail(p, context.Cause(ctx))
	case errors.Is(err, ErrNoOneToAsk):
		s.fail(p, s.denied(req, each, Ask))
	case errors.Is(err, ErrCannotAsk):
		s.fail(p, &tool.Failure{
			Message: fmt.Sprintf("permission denied: %s on %s needs the user's approval, and the user cannot be asked from this client",
				quote(req.Action), describe(resourcesOf(req))),
			Err: ErrDenied,
		})
	case err != nil:
		s.fail(p, fmt.Errorf("permission: ask %s: %w", p.id, err))
	default:
		if rerr := s.resolve(p, ans); errors.Is(rerr, errInvalidAnswer) {
			s.fail(p, fmt.Errorf("permission: asker answered ask %s: %w", p.id, rerr))
		}
	}
	<-p.done
	return p.err
}

var errInvalidAnswer = errors.New("invalid answer")

// Pending returns the asks waiting for an answer, oldest first. Each Request is a
// copy. It is safe for concurrent use.
func (s *Service) Pending() []PendingAsk {
	s.mu.Lock()
	defer s.mu.Unlock()
	ps := slices.SortedFunc(maps.Values(s.pending), bySeq)
	out := make([]PendingAsk, len(ps))
	for i, p := range ps {
		out[i] = PendingAsk{ID: p.id, Request: cloneRequest(p.req)}
	}
	return out
}

// Reply answers the pending ask id out of band (the serve API uses it), exactly as
// if the Asker had returned a. It fails with ErrUnknownAsk when id is not pending,
// and for an invalid Reply value (the ask stays pending). With Always, it returns
// the *StateError if saving fails (the waiting Assert returns it too). It is safe
// for concurrent use.
func (s *Service) Reply(id string, a Answer) error {
	if err := checkAnswer(a); err != nil {
		return fmt.Errorf("permission: reply to %s: %w", id, err)
	}
	s.mu.Lock()
	p := s.pending[id]
	s.mu.Unlock()
	if p == nil {
		return fmt.Errorf("%w: %q", ErrUnknownAsk, id)
	}
	return s.resolve(p, a)
}

// EndSession declines every pending ask of the session: their Asserts return a
// *DeclinedError. Asks made later for the same id are unaffected. It is idempotent
// and safe for concurrent use.
func (s *Service) EndSession(sessionID string) {
	for _, p := range s.claimSession(sessionID, "", nil) {
		s.finish(p, &DeclinedError{ID: p.id, Action: p.req.Action, Reason: "the session ended"})
	}
}

// Close declines every pending ask (their Asserts return a *DeclinedError); from
// then on an Assert that would need to ask declines at once, while Evaluate and
// requests the rules decide keep working. It is idempotent and safe for concurrent
// use; it does not wait for Askers to return.
func (s *Service) Close() {
	s.mu.Lock()
	s.closed = true
	ps := s.claimLocked(func(*pending) bool { return true })
	s.mu.Unlock()
	for _, p := range ps {
		s.finish(p, &DeclinedError{ID: p.id, Action: p.req.Action, Reason: "the location closed"})
	}
}

// resolve applies answer a to p unless p was already resolved. Claiming first makes
// exactly one answer count, and only that one saves.
func (s *Service) resolve(p *pending, a Answer) error {
	if err := checkAnswer(a); err != nil {
		return err
	}
	if !s.claim(p) {
		return fmt.Errorf("%w: %q (already answered)", ErrUnknownAsk, p.id)
	}
	p.reply = a.Reply
	switch a.Reply {
	case Once:
		s.finish(p, nil)
	case Always:
		if err := s.save(p.req.Source.ToolSource, p.req.Action, p.req.Save); err != nil {
			s.finish(p, err)
			return err
		}
		s.finish(p, nil)
		s.recheckPending(p)
	case Reject:
		s.finish(p, s.rejection(p, a.Message, "rejected"))
		for _, o := range s.claimSession(p.req.SessionID, p.id, nil) {
			s.finish(o, s.rejection(o, a.Message, "another request of the session was rejected"))
		}
	}
	return nil
}

// fail resolves p with err unless p was already resolved.
func (s *Service) fail(p *pending, err error) {
	if s.claim(p) {
		s.finish(p, err)
	}
}

func (s *Service) claim(p *pending) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending[p.id] != p {
		return false
	}
	delete(s.pending, p.id)
	return true
}

// claimSession claims the pending asks of a session other than except that keep
// satisfies (nil: all).
func (s *Service) claimSession(sessionID, except string, keep func(*pending) bool) []*pending {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.claimLocked(func(p *pending) bool {
		return p.req.SessionID == sessionID && p.id != except && (keep == nil || keep(p))
	})
}

func (s *Service) claimLocked(keep func(*pending) bool) []*pending {
	var out []*pending
	for id, p := range s.pending {
		if keep(p) {
			delete(s.pending, id)
			out = append(out, p)
		}
	}
	slices.SortFunc(out, bySeq)
	return out
}

func bySeq(a, b *pending) int { return cmp.Compare(a.seq, b.seq) }

func (s *Service) finish(p *pending, err error) {
	p.err = err
	close(p.done)
	p.cancel(errAnswered)
}

// recheckPending allows the other pending asks that the rules now allow, whichever
// session made them: the approval just saved is the Location's.
func (s *Service) recheckPending(p *pending) {
	s.mu.Lock()
	allowed := s.claimLocked(func(o *pending) bool {
		if o == p {
			return false
		}
		eff, _ := s.evaluateLocked(o.req.Source.ToolSource, o.req.Action, o.req.Resources)
		return eff == Allow
	})
	s.mu.Unlock()
	for _, o := range allowed {
		s.finish(o, nil)
	}
}

// save persists allow rules for (source, action, pattern) for each pattern, merged
// with the approvals the state file holds now (see addState), then installs what
// the file holds. When persisting fails nothing is installed.
func (s *Service) save(source, action string, patterns []string) error {
	s.saveMu.Lock()
	defer s.saveMu.Unlock()
	var add []approval
	for _, pat := range patterns {
		if pat != "" {
			add = append(add, approval{Action: action, Resource: pat, Source: source})
		}
	}
	if len(add) == 0 {
		return nil
	}
	if s.file == "" {
		s.mu.Lock()
		for _, a := range add {
			if !slices.Contains(s.saved, a) {
				s.saved = append(s.saved, a)
			}
		}
		s.mu.Unlock()
		return nil
	}
	all, fi, err := addState(s.file, add)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.saved, s.info = all, fi
	s.mu.Unlock()
	return nil
}

func checkAnswer(a Answer) error {
	switch a.Reply {
	case Once, Always, Reject:
		return nil
	}
	return fmt.Errorf("%w: reply %q (want once, always or reject)", errInvalidAnswer, a.Reply)
}

// rejection is the error for a rejected ask: a model-visible failure carrying the
// person's feedback, or a decline when there is none.
func (s *Service) rejection(p *pending, message, reason string) error {
	if strings.TrimSpace(message) == "" {
		return &DeclinedError{ID: p.id, Action: p.req.Action, Reason: reason}
	}
	return &tool.Failure{
		Message: fmt.Sprintf("permission rejected: the person rejected %s on %s with this feedback: %s",
			quote(p.req.Action), describe(resourcesOf(p.req)), message),
		Err: ErrRejected,
	}
}

// denied is the model-visible failure for a request a rule denies (effect Deny) or
// that nobody can be asked about (effect Ask). Its message names the action and the
// resources with that effect; its cause, a *DeniedError, carries the hint for the
// runner and the person: a rule that would allow the first of them, and where.
func (s *Service) denied(req Request, each []Effect, eff Effect) error {
	var which []string
	for i, res := range resourcesOf(req) {
		if each[i] == eff {
			which = append(which, res)
		}
	}
	where := s.hint
	if where == "" {
		where = "the Location config"
	}
	example, _ := json.Marshal(struct {
		Action   string `json:"action"`
		Resource string `json:"resource"`
		Effect   Effect `json:"effect"`
	}{req.Action, which[0], Allow})
	d := &DeniedError{Action: req.Action, Resources: which, NoOneToAsk: eff == Ask}
	if eff == Deny {
		d.hint = fmt.Sprintf("to allow it, add a rule after the denying one in the \"permission\" list of %s, for example %s", where, example)
	} else {
		d.hint = fmt.Sprintf("to allow it, add a rule to the \"permission\" list of %s, for example %s", where, example)
	}
	return &tool.Failure{Message: d.Error(), Err: d}
}

func resourcesOf(req Request) []string {
	if len(req.Resources) == 0 {
		return []string{"*"}
	}
	return req.Resources
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// describe lists up to five quoted resources.
func describe(res []string) string {
	const max = 5
	q := make([]string, 0, max)
	for _, r := range res[:min(len(res), max)] {
		q = append(q, quote(r))
	}
	s := strings.Join(q, ", ")
	if len(res) > max {
		s += fmt.Sprintf(" and %d more", len(res)-max)
	}
	return s
}

func cloneRequest(r Request) Request {
	r.Resources = slices.Clone(r.Resources)
	r.Save = slices.Clone(r.Save)
	r.Metadata = maps.Clone(r.Metadata)
	return r
}

// AssertTool is the host's check before a call reaches an untrusted source (a plugin
// not marked trusted, an MCP server, a manifest tool): action = the tool's name,
// resources ["*"], saved as "*" on "always", identified by the call's Invocation.
// It returns what Assert returns.
func (s *Service) AssertTool(ctx context.Context, tool string, inv tool.Invocation) error {
	return s.AssertToolFrom(ctx, "", tool, inv)
}

// AssertToolFrom is AssertTool for a tool of the named source (see
// Source.ToolSource): rules for other sources do not apply, and an "always" answer
// is saved for this source only.
func (s *Service) AssertToolFrom(ctx context.Context, source, tool string, inv tool.Invocation) error {
	return s.Assert(ctx, Request{
		SessionID: inv.SessionID,
		Agent:     inv.Agent,
		Source:    Source{Type: "tool", Tool: tool, MessageID: inv.AssistantMessageID, CallID: inv.ToolCallID, ToolSource: source},
		Action:    tool,
		Resources: []string{"*"},
		Save:      []string{"*"},
	})
}
