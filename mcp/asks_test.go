//go:build unix

package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/toolhost/toolhost/internal/testio"
	"github.com/toolhost/toolhost/mcp"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sdk"
)

// askInput is what the hostile server's tool "ask" is called with: it sends the
// host N requests of its own and answers with an askReport of what the host
// answered them.
type askInput struct {
	N int `json:"n"`
	// Method is what it asks: "elicitation/create" (by default), or "mixed":
	// elicitation and sampling/createMessage in turn.
	Method string `json:"method"`
	// Together sends them all at once; otherwise each waits for the answer to the
	// one before.
	Together bool `json:"together"`
	// Stall sends them all, answers the call at once and never reads again.
	Stall bool `json:"stall"`
	// IDBytes pads each request's id (which the host's answer repeats).
	IDBytes int `json:"idBytes"`
}

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// askReport is the tool "ask"'s answer.
type askReport struct {
	Answered int
	// Refused counts the error answers by code; Messages are their distinct
	// messages (at most 4).
	Refused  map[string]int
	Messages []string
}

func (r askReport) refused() (n int) {
	for _, c := range r.Refused {
		n += c
	}
	return n
}

// askFlood is the hostile server's "asks" mode. Its requests' ids are strings,
// which the reading loop hands back through answered.
type askFlood struct {
	out *wire
	mu  sync.Mutex
	seq int
	// waiting holds a channel for each request awaiting its answer: nil for a
	// result, else the error.
	waiting map[string]chan *rpcError
}

func (f *askFlood) answered(id json.RawMessage, e *rpcError) {
	var key string
	if json.Unmarshal(id, &key) != nil {
		return
	}
	f.mu.Lock()
	ch := f.waiting[key]
	delete(f.waiting, key)
	f.mu.Unlock()
	if ch != nil {
		ch <- e
	}
}

// start runs one call of "ask"; the caller holds f.out.mu.
func (f *askFlood) start(callID json.RawMessage, in askInput) {
	if in.Stall {
		for range in.N {
			f.out.w.WriteString(f.request(in, nil))
		}
		fmt.Fprintf(f.out.w, `{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"stalled"}]}}`+"\n", callID)
		f.out.w.Flush()
		time.Sleep(time.Hour) // never reads again: the host stops it
	}
	go f.run(callID, in)
}

// request registers the next request and returns its line.
func (f *askFlood) request(in askInput, answer chan *rpcError) string {
	f.mu.Lock()
	f.seq++
	n := f.seq
	key := fmt.Sprintf("ask-%d-", n)
	key += strings.Repeat("i", max(0, in.IDBytes-len(key)))
	if answer != nil {
		f.waiting[key] = answer
	}
	f.mu.Unlock()
	method, params := "elicitation/create", `{"message":"What is your name?","requestedSchema":{"type":"object","properties":{"name":{"type":"string"}}}}`
	if in.Method == "mixed" && n%2 == 0 {
		method, params = "sampling/createMessage", `{"messages":[{"role":"user","content":{"type":"text","text":"hi"}}],"maxTokens":10}`
	}
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"method":%q,"params":%s}`+"\n", key, method, params)
}

func (f *askFlood) run(callID json.RawMessage, in askInput) {
	report := askReport{Refused: map[string]int{}}
	collect := func(ch chan *rpcError) {
		e := <-ch
		if e == nil {
			report.Answered++
			return
		}
		report.Refused[strconv.Itoa(e.Code)]++
		if len(report.Messages) < 4 && !strings.Contains(strings.Join(report.Messages, "\n"), e.Message) {
			report.Messages = append(report.Messages, e.Message)
		}
	}
	var pending []chan *rpcError
	for range in.N {
		ch := make(chan *rpcError, 1)
		line := f.request(in, ch)
		f.out.mu.Lock()
		f.out.w.WriteString(line)
		f.out.w.Flush()
		f.out.mu.Unlock()
		if in.Together {
			pending = append(pending, ch)
		} else {
			collect(ch)
		}
	}
	for _, ch := range pending {
		collect(ch)
	}
	text, _ := json.Marshal(report)
	f.out.mu.Lock()
	defer f.out.mu.Unlock()
	fmt.Fprintf(f.out.w, `{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":%q}]}}`+"\n", callID, text)
	f.out.w.Flush()
}

// person answers the hostile server's asks: it counts those that reach it and
// how many are open at once. With hold set, the first ask waits until hold is
// closed.
type person struct {
	first     chan struct{} // closed at the first ask
	firstOnce sync.Once
	hold      chan struct{}

	mu                   sync.Mutex
	open, maxOpen, asked int
}

func newPerson(hold bool) *person {
	p := &person{first: make(chan struct{})}
	if hold {
		p.hold = make(chan struct{})
	}
	return p
}

func (p *person) answer(ctx context.Context) error {
	p.mu.Lock()
	p.asked++
	p.open++
	p.maxOpen = max(p.maxOpen, p.open)
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.open--
		p.mu.Unlock()
	}()
	first := false
	p.firstOnce.Do(func() { first = true; close(p.first) })
	if first && p.hold != nil {
		select {
		case <-p.hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (p *person) Ask(ctx context.Context, _ sdk.Question) (sdk.Answer, error) {
	if err := p.answer(ctx); err != nil {
		return sdk.Answer{}, err
	}
	return sdk.Answer{Action: sdk.Accepted, Content: []byte(`{"name":"Ada"}`)}, nil
}

func (p *person) Sample(ctx context.Context, _ sdk.SampleRequest) (sdk.SampleResult, error) {
	if err := p.answer(ctx); err != nil {
		return sdk.SampleResult{}, err
	}
	return sdk.SampleResult{Model: "fake", Message: sdk.SampleMessage{Role: "assistant", Content: sdk.Text("a completion")}}, nil
}

func (p *person) counts() (asked, maxOpen int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.asked, p.maxOpen
}

// startAsker starts the hostile server in mode "asks" with cfg's ask limits,
// logging as JSON into logs.
func startAsker(t *testing.T, h *host, logs *testio.SyncBuffer, edit func(*mcp.Config)) *mcp.Instance {
	t.Helper()
	cfg := hostileConfig(t, "asks", 0)
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info, JSONFormat: true})
	if edit != nil {
		edit(&cfg)
	}
	inst, err := mcp.Start(t.Context(), h.root, cfg, mcp.Target{Registry: h.reg, Location: h.loc}, 1)
	if err != nil {
		t.Fatal(err)
	}
	h.track(inst)
	t.Cleanup(func() { _ = inst.Stop(context.Background()) })
	return inst
}

// askCall calls the tool "ask" and returns its report.
func askCall(t *testing.T, h *host, ctx context.Context, in askInput) askReport {
	t.Helper()
	input, _ := json.Marshal(in)
	st, err := h.settle(ctx, "hostile_ask", string(input))
	if err != nil || st.Outcome != registry.Completed {
		t.Fatalf("ask %s: %v %v", input, st, err)
	}
	var r askReport
	if err := json.Unmarshal([]byte(st.Text()), &r); err != nil {
		t.Fatalf("ask %s: %q: %v", input, st.Text(), err)
	}
	return r
}

// refusalLogLines counts the log lines about refused asks.
func refusalLogLines(t *testing.T, logs string) int {
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		if strings.Contains(line, "refus") {
			n++
		}
	}
	return n
}

// A server that sends 1,000 elicitation requests at once, while the person
// still answers the first: the person is asked one at a time, at most the burst
// in all; every other request is refused with an error the server receives,
// logged once per burst of refusals; the host's calls to the server are answered
// meanwhile; and the flood leaves no goroutine behind.
func TestServerAsksAreBounded(t *testing.T) {
	h := newBareHost(t)
	logs := &testio.SyncBuffer{}
	startAsker(t, h, logs, nil)
	p := newPerson(true)
	ctx := sdk.WithInteractor(t.Context(), p)
	goroutines := runtime.NumGoroutine()

	const n = 1000
	done := make(chan askReport, 1)
	go func() {
		defer close(done)
		done <- askCall(t, h, ctx, askInput{N: n, Together: true})
	}()
	select {
	case <-p.first:
	case <-done:
		t.Fatal("the flood ended before it asked the person anything")
	}
	// The person is still answering the first ask; the server's flood is in
	// flight. The host's own calls to it go on.
	if st := mustSettle(t, h, "hostile_echo", `{}`); st.Text() != "echo" {
		t.Errorf("echo during the flood: %q", st.Text())
	}
	close(p.hold)
	r, ok := <-done
	if !ok {
		return // askCall failed
	}
	asked, maxOpen := p.counts()
	t.Logf("%d asks: %d answered, refused %v %q; the person was asked %d, at most %d at once; %d log lines", n, r.Answered, r.Refused, r.Messages, asked, maxOpen, strings.Count(logs.String(), "\n"))
	if maxOpen != 1 {
		t.Errorf("the person was asked %d at once; want 1 (max_pending_asks)", maxOpen)
	}
	if asked != r.Answered || r.Answered+r.refused() != n {
		t.Errorf("the person was asked %d, the server got %d answers and %d refusals of %d", asked, r.Answered, r.refused(), n)
	}
	if asked > mcp.DefaultAskBurst {
		t.Errorf("the person was asked %d times; want at most the burst, %d", asked, mcp.DefaultAskBurst)
	}
	if !strings.Contains(strings.Join(r.Messages, "\n"), "max_pending_asks") {
		t.Errorf("refusals %q: want one naming max_pending_asks", r.Messages)
	}
	if lines := refusalLogLines(t, logs.String()); lines > 2*asked+2 {
		t.Errorf("%d log lines about refusals for %d asks: want one per burst", lines, asked)
	}
	runtime.GC()
	if after := runtime.NumGoroutine(); after > goroutines+4 {
		t.Errorf("%d goroutines before the flood, %d after it", goroutines, after)
	}
}

// A server that sends requests of its own and stops reading the host's answers
// cannot stall the host: the reader reads on (the call's own answer arrives),
// the goroutines answering stay within the requests the host answers at once,
// and past the queue of answers the connection is closed, saying why.
func TestServerThatDoesNotReadCannotStallTheHost(t *testing.T) {
	t.Run("WithinTheQueue", func(t *testing.T) {
		h := newBareHost(t)
		inst := startAsker(t, h, &testio.SyncBuffer{}, nil)
		ctx := sdk.WithInteractor(t.Context(), newPerson(false))
		goroutines := runtime.NumGoroutine()
		// 80 requests, whose answers (2 KiB ids) fill the pipe to the server
		// after about 30.
		st, err := h.settle(ctx, "hostile_ask", `{"n":80,"stall":true,"idBytes":2048}`)
		if err != nil || st.Text() != "stalled" {
			t.Fatalf("ask: %v %v", st, err)
		}
		grown := runtime.NumGoroutine() - goroutines
		t.Logf("%d goroutines more while the server does not read", grown)
		if grown > 24 {
			t.Errorf("%d goroutines more while the server does not read; want them bounded by the requests answered at once", grown)
		}
		_ = inst.Stop(context.Background())
	})
	t.Run("PastTheQueue", func(t *testing.T) {
		h := newBareHost(t)
		logs := &testio.SyncBuffer{}
		inst := startAsker(t, h, logs, func(c *mcp.Config) {
			c.Timeout = time.Minute
			*c = mcp.WithNotReadingGrace(*c, 100*time.Millisecond)
		})
		ctx := sdk.WithInteractor(t.Context(), newPerson(false))
		st, err := h.settle(ctx, "hostile_ask", `{"n":2000,"stall":true,"idBytes":2048}`)
		t.Logf("ask: %v, %v", st, err)
		var stalled *mcp.NotReadingError
		if !errors.As(err, &stalled) || stalled.Server != "hostile" {
			t.Fatalf("ask: %v %v; want the connection closed with a *mcp.NotReadingError", st, err)
		}
		<-inst.Done()
		if n := strings.Count(logs.String(), "does not read"); n != 1 {
			t.Errorf("%d log lines say the server does not read; want 1\n%s", n, logs)
		}
	})
}

// A server asking one question after another, elicitation and sampling in turn,
// each answered at once: past its ask_burst the asks come faster than its
// asks_per_minute, and are refused without reaching the person, with an error
// naming the limit and saying when to ask again.
func TestServerAsksPastTheRateAreRefused(t *testing.T) {
	h := newBareHost(t)
	logs := &testio.SyncBuffer{}
	limits := mcp.AskLimits{MaxPending: 1, Burst: 4, PerMinute: 6}
	startAsker(t, h, logs, func(c *mcp.Config) { c.Asks = limits })
	p := newPerson(false)
	ctx := sdk.WithInteractor(t.Context(), p)

	const n = 40
	start := time.Now()
	r := askCall(t, h, ctx, askInput{N: n, Method: "mixed"})
	elapsed := time.Since(start)
	asked, maxOpen := p.counts()
	t.Logf("%d asks in %s: %d answered, refused %v %q; %d log lines", n, elapsed, r.Answered, r.Refused, r.Messages, strings.Count(logs.String(), "\n"))
	// The bucket holds Burst and gains PerMinute a minute: over the call, no
	// more than that can have been let through.
	most := limits.Burst + int(elapsed.Minutes()*float64(limits.PerMinute)) + 1
	if asked != r.Answered || asked < limits.Burst || asked > most || maxOpen != 1 {
		t.Errorf("the person was asked %d (at most %d at once), the server got %d answers; want %d to %d, one at a time", asked, maxOpen, r.Answered, limits.Burst, most)
	}
	if r.Refused["-32000"] != n-asked || len(r.Refused) != 1 {
		t.Errorf("refusals by code %v; want the other %d with code -32000", r.Refused, n-asked)
	}
	if msg := strings.Join(r.Messages, "\n"); !strings.Contains(msg, "asks_per_minute 6") || !strings.Contains(msg, "ask again in") {
		t.Errorf("refusals %q: want them to name asks_per_minute and say when to ask again", r.Messages)
	}
	if lines := refusalLogLines(t, logs.String()); lines > 2*asked+2 {
		t.Errorf("%d log lines about refusals for %d asks: want two per run of refusals\n%s", lines, asked, logs)
	}
}
