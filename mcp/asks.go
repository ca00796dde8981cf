package mcp

import (
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"golang.org/x/time/rate"

	"github.com/toolhost/toolhost/internal/loglimit"
)

// A server's elicitation/create and sampling/createMessage requests are its asks:
// each reaches a person (sdk.Ask), or the runner's model on the person's behalf
// (sdk.Sample), through the call in flight (forward.go). A server may put no more
// to them than its AskLimits allow: an ask past them is answered at once with a
// JSON-RPC error (code codeAskRefused) that names the limit, and reaches nobody.
// The first refusal of a run of refusals is logged, and the run's count once it
// ends (an ask is let through again, or the server stops): two lines a run,
// whatever the server sends. The limits hold for stdio and remote servers alike,
// and so does the gate's (budget.go) bound on how many of the server's requests
// of any kind are being answered at once.

// The defaults of AskLimits.
const (
	DefaultMaxPendingAsks = 1
	DefaultAskBurst       = 10
	DefaultAsksPerMinute  = 20
)

// MaxPendingAsks is the most AskLimits.MaxPending may be: the most requests of a
// server the host answers at once.
const MaxPendingAsks = maxServing

// AskLimits bounds a server's asks (elicitation/create and sampling/createMessage
// together). Zero fields mean the defaults.
type AskLimits struct {
	// MaxPending is how many of the server's asks may wait for an answer at once
	// (max_pending_asks); one more is refused at once, never queued. Default
	// DefaultMaxPendingAsks; at most MaxPendingAsks (more counts as that).
	MaxPending int
	// Burst and PerMinute are a token bucket (ask_burst, asks_per_minute): an ask
	// takes a token, the bucket holds Burst and gains PerMinute a minute, and an
	// ask finding it empty is refused without reaching anyone. Defaults
	// DefaultAskBurst and DefaultAsksPerMinute.
	Burst     int
	PerMinute int
}

func (l AskLimits) withDefaults() AskLimits {
	if l.MaxPending <= 0 {
		l.MaxPending = DefaultMaxPendingAsks
	}
	l.MaxPending = min(l.MaxPending, MaxPendingAsks)
	if l.Burst <= 0 {
		l.Burst = DefaultAskBurst
	}
	if l.PerMinute <= 0 {
		l.PerMinute = DefaultAsksPerMinute
	}
	return l
}

// codeAskRefused is the JSON-RPC error code of a refused ask, in the range JSON-RPC
// leaves to implementations. The error's data says which limit refused it
// ({"limit": "max_pending_asks"}, or "asks_per_minute" with "retryAfterMs").
const codeAskRefused = -32000

// asks applies one server's AskLimits. Safe for concurrent use.
type asks struct {
	server string
	limits AskLimits
	bucket *rate.Limiter
	logs   *loglimit.Logger
	now    func() time.Time

	mu      sync.Mutex
	pending int
	// The run of refusals under way: how many past each limit.
	pastPending, pastRate int
}

func newAsks(server string, limits AskLimits, logs *loglimit.Logger) *asks {
	limits = limits.withDefaults()
	return &asks{
		server: server, limits: limits, logs: logs, now: time.Now,
		// golang.org/x/time/rate: the Go project's token bucket, already linked
		// through the go-sdk (its logging handler).
		bucket: rate.NewLimiter(rate.Limit(float64(limits.PerMinute)/60), limits.Burst),
	}
}

// begin lets one ask (method) through, to be ended by calling end once answered,
// or refuses it with a *jsonrpc.Error for the server.
func (a *asks) begin(method string) (end func(), refused error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	switch {
	case a.pending >= a.limits.MaxPending:
		a.refusing(&a.pastPending, "max_pending_asks")
		return nil, a.refusal(fmt.Sprintf("toolhost: refused %s: %d ask(s) of this server already wait for the person, the most the host puts to them at once (max_pending_asks %d); ask again once answered",
			method, a.pending, a.limits.MaxPending), map[string]any{"limit": "max_pending_asks"})
	case !a.bucket.AllowN(now, 1):
		wait := time.Duration((1 - a.bucket.TokensAt(now)) / float64(a.bucket.Limit()) * float64(time.Second))
		wait = max(wait.Round(time.Millisecond), time.Millisecond)
		a.refusing(&a.pastRate, "asks_per_minute")
		return nil, a.refusal(fmt.Sprintf("toolhost: refused %s: this server asks more often than the host allows (ask_burst %d, asks_per_minute %d), so the person was not asked; ask again in %s",
			method, a.limits.Burst, a.limits.PerMinute, wait), map[string]any{"limit": "asks_per_minute", "retryAfterMs": wait.Milliseconds()})
	}
	a.endRun()
	a.pending++
	var once sync.Once
	return func() {
		once.Do(func() {
			a.mu.Lock()
			a.pending--
			a.mu.Unlock()
		})
	}, nil
}

func (a *asks) refusal(msg string, data map[string]any) error {
	raw, _ := json.Marshal(data)
	return &jsonrpc.Error{Code: codeAskRefused, Message: msg, Data: raw}
}

// refusing counts a refusal past limit, logging the first of a run.
func (a *asks) refusing(past *int, limit string) {
	if a.pastPending+a.pastRate == 0 {
		a.logs.Log(hclog.Warn, "refusing the server's asks (elicitation, sampling) without putting them to the person; the count follows once they are let through again",
			"server", a.server, "limit", limit, "max_pending_asks", a.limits.MaxPending, "ask_burst", a.limits.Burst, "asks_per_minute", a.limits.PerMinute)
	}
	*past++
}

// endRun logs the count of the run of refusals under way, if any. a.mu is held.
func (a *asks) endRun() {
	if a.pastPending+a.pastRate == 0 {
		return
	}
	a.logs.Log(hclog.Warn, "refused asks of the server", "server", a.server,
		"past_max_pending_asks", a.pastPending, "past_asks_per_minute", a.pastRate)
	a.pastPending, a.pastRate = 0, 0
}

// close logs the count of the last run of refusals; the server is gone.
func (a *asks) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.endRun()
}
