package mcp_test

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/toolhost/toolhost/internal/proctest"
	"github.com/toolhost/toolhost/mcp"
)

// hostileHTTP is a remote MCP server over streamable HTTP, raw JSON-RPC written
// by hand, whose tools misbehave on purpose. Its tools (arguments {"mib": n,
// "n": n}):
//   - echo answers "echo";
//   - json answers with n MiB of text in a JSON reply, gzipped with gzip set;
//   - refuse answers HTTP 400 with a body of n MiB;
//   - sse answers with n MiB of text in one event of an event stream;
//   - tail answers on an event stream, then sends n pings of its own on it;
//   - ping sends n pings of its own on the call's stream, then answers.
//
// With pages set, its tools/list has that many pages of one tool each, each
// padded to 256 KiB. The POSTs that answer its requests are held while hold is
// open, and counted.
type hostileHTTP struct {
	t     *testing.T
	srv   *httptest.Server
	pages int
	hold  chan struct{}

	mu                    sync.Mutex
	answers, refusals     int
	how                   map[string]string // by request id: "answer" or "refusal"
	inFlight, maxInFlight int
	// ended receives, for each json, refuse and sse call, the bytes its handler
	// wrote and whether it wrote them all (the host read them all).
	ended chan written
}

type written struct {
	bytes    int64
	complete bool
}

func startHostileHTTP(t *testing.T, pages int) *hostileHTTP {
	s := &hostileHTTP{t: t, pages: pages, hold: make(chan struct{}), ended: make(chan written, 16), how: map[string]string{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(func() {
		s.release()
		s.srv.CloseClientConnections()
		s.srv.Close()
	})
	return s
}

func (s *hostileHTTP) URL() string { return s.srv.URL + "/mcp" }

// release lets the held POSTs through, now and from now on. Idempotent.
func (s *hostileHTTP) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.hold:
	default:
		close(s.hold)
	}
}

func (s *hostileHTTP) serve(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet: // no standalone stream
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	case http.MethodDelete:
		return
	}
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Error  json.RawMessage `json:"error"`
		Params struct {
			ProtocolVersion string `json:"protocolVersion"`
			Cursor          string `json:"cursor"`
			Name            string `json:"name"`
			Arguments       struct {
				MiB  int  `json:"mib"`
				N    int  `json:"n"`
				Gzip bool `json:"gzip"`
			} `json:"arguments"`
		} `json:"params"`
	}
	if err := json.NewDecoder(r.Body).Decode(&msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if msg.Method == "" { // an answer to a request of ours
		var id string
		_ = json.Unmarshal(msg.ID, &id)
		s.answered(id, msg.Error != nil)
		w.WriteHeader(http.StatusAccepted)
		return
	}
	if msg.ID == nil { // a notification
		w.WriteHeader(http.StatusAccepted)
		return
	}
	w.Header().Set("Mcp-Session-Id", "hostile-session")
	reply := func(result string) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, msg.ID, result)
	}
	args := msg.Params.Arguments
	switch {
	case msg.Method == "initialize":
		reply(fmt.Sprintf(`{"protocolVersion":%q,"capabilities":{"tools":{}},"serverInfo":{"name":"hostile","version":"1"}}`, msg.Params.ProtocolVersion))
	case msg.Method == "tools/list" && s.pages > 0:
		page, _ := strconv.Atoi(msg.Params.Cursor)
		reply(fmt.Sprintf(`{"tools":[{"name":"t%d","inputSchema":{"type":"object"}}],"nextCursor":"%d","_meta":{"pad":%q}}`,
			page, page+1, strings.Repeat("p", 256<<10)))
	case msg.Method == "tools/list":
		var tools []string
		for _, name := range []string{"echo", "json", "refuse", "sse", "tail", "ping"} {
			tools = append(tools, fmt.Sprintf(`{"name":%q,"inputSchema":{"type":"object"}}`, name))
		}
		reply(`{"tools":[` + strings.Join(tools, ",") + `]}`)
	case msg.Method == "tools/call" && msg.Params.Name == "echo":
		reply(`{"content":[{"type":"text","text":"echo"}]}`)
	case msg.Method == "tools/call" && msg.Params.Name == "json":
		w.Header().Set("Content-Type", "application/json")
		var out io.Writer = w
		if args.Gzip {
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			defer zw.Close()
			out = zw
		}
		s.ended <- s.text(out, string(msg.ID), args.MiB, "")
	case msg.Method == "tools/call" && msg.Params.Name == "refuse":
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		s.ended <- s.text(w, string(msg.ID), args.MiB, "")
	case msg.Method == "tools/call" && msg.Params.Name == "sse":
		w.Header().Set("Content-Type", "text/event-stream")
		s.ended <- s.text(w, string(msg.ID), args.MiB, "data: ")
	case msg.Method == "tools/call" && msg.Params.Name == "tail":
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"tail\"}]}}\n\n", msg.ID)
		for i := range args.N {
			fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"id\":\"late-%d\",\"method\":\"ping\"}\n\n", i)
		}
	case msg.Method == "tools/call" && msg.Params.Name == "ping":
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range args.N {
			fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"id\":\"ping-%d\",\"method\":\"ping\"}\n\n", i)
		}
		fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"pinged\"}]}}\n\n", msg.ID)
	default:
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"no such method"}}`, msg.ID)
	}
}

// text writes the response to call id, whose text is mib MiB, each line of it
// prefixed (an event's data), and says how much it wrote.
func (s *hostileHTTP) text(w io.Writer, id string, mib int, prefix string) written {
	var n int64
	write := func(p string) bool {
		k, err := io.WriteString(w, p)
		n += int64(k)
		return err == nil
	}
	if !write(prefix + `{"jsonrpc":"2.0","id":` + id + `,"result":{"content":[{"type":"text","text":"`) {
		return written{bytes: n}
	}
	chunk := strings.Repeat("x", 64<<10)
	for range mib << 4 {
		if !write(chunk) {
			return written{bytes: n}
		}
	}
	if !write(`"}]}}`) || prefix != "" && !write("\n\n") {
		return written{bytes: n}
	}
	return written{bytes: n, complete: true}
}

// answered counts an answer to one of the server's requests, holding it while
// hold is open.
func (s *hostileHTTP) answered(id string, refusal bool) {
	s.mu.Lock()
	s.how[id] = "answer"
	if refusal {
		s.refusals++
		s.how[id] = "refusal"
	} else {
		s.answers++
	}
	s.inFlight++
	s.maxInFlight = max(s.maxInFlight, s.inFlight)
	s.mu.Unlock()
	<-s.hold
	s.mu.Lock()
	s.inFlight--
	s.mu.Unlock()
}

func (s *hostileHTTP) counts() (answers, refusals, maxInFlight int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.answers, s.refusals, s.maxInFlight
}

// startHostile starts generation 1 of the hostile server s, with a 1 MiB message
// cap and a 4 MiB budget unless edit says otherwise; stopped at the test's end.
func (h *host) startHostile(t *testing.T, s *hostileHTTP, edit func(*mcp.Config)) (*mcp.Instance, error) {
	cfg := h.remote("hostile", s.URL(), func(c *mcp.Config) {
		c.MaxMessageBytes, c.MaxHeldBytes = 1<<20, 4<<20
		if edit != nil {
			edit(c)
		}
	})
	inst, err := mcp.Start(t.Context(), h.root, cfg, mcp.Target{Registry: h.reg, Location: h.loc}, 1)
	if err == nil {
		t.Cleanup(func() { _ = inst.Stop(context.Background()) })
	}
	return inst, err
}

// A remote server's tools/list whose pages are each within the message cap, but
// together more than its max_held_bytes, fails the listing, naming the server
// and the limit, as a stdio server's does.
func TestRemoteListingPagesAreBoundedByTheBudget(t *testing.T) {
	h := newBareHost(t)
	_, err := h.startHostile(t, startHostileHTTP(t, 100), func(c *mcp.Config) { c.MaxHeldBytes = 2 << 20 })
	var budget *mcp.BudgetError
	if !errors.As(err, &budget) || budget.Server != "hostile" || budget.Limit != 2<<20 ||
		!strings.Contains(err.Error(), "max_held_bytes of 2097152") {
		t.Fatalf("start = %v; want the listing refused by max_held_bytes, naming the server", err)
	}
}

// A remote server's message past the message cap fails the call it answers with
// a *MessageTooLargeError, whether it comes as a JSON reply (gzipped or not: the
// cap counts what it unpacks to), which the host stops reading, or as an event
// of a stream, which the host reads past without keeping; the session goes on.
func TestRemoteMessagesPastTheCapFailTheirCall(t *testing.T) {
	for _, tc := range []struct{ name, tool, args string }{
		{"json", "hostile_json", `{"mib":64}`},
		{"gzip", "hostile_json", `{"mib":64,"gzip":true}`},
		{"sse", "hostile_sse", `{"mib":8}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newBareHost(t)
			s := startHostileHTTP(t, 0)
			if _, err := h.startHostile(t, s, nil); err != nil {
				t.Fatal(err)
			}
			_, err := h.settle(t.Context(), tc.tool, tc.args)
			var tooLarge *mcp.MessageTooLargeError
			if !errors.As(err, &tooLarge) || tooLarge.Server != "hostile" || tooLarge.Limit != 1<<20 {
				t.Fatalf("a message past the cap: %v; want a *MessageTooLargeError naming the server", err)
			}
			w := <-s.ended
			t.Logf("%v; the server wrote %d MiB (all: %v)", err, w.bytes>>20, w.complete)
			if tc.name == "json" && w.complete {
				t.Errorf("the host read all %d MiB of a JSON reply past the cap", w.bytes>>20)
			}
			if st := mustSettle(t, h, "hostile_echo", `{}`); st.Text() != "echo" {
				t.Errorf("echo afterwards: %q", st.Text())
			}
		})
	}
}

// A reply that is not a success is read no further than 64 KiB (the SDK reads
// such a body whole, for a JSON-RPC error in it; without one, it ends the
// session).
func TestRemoteErrorBodiesAreBounded(t *testing.T) {
	h := newBareHost(t)
	s := startHostileHTTP(t, 0)
	if _, err := h.startHostile(t, s, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := h.settle(t.Context(), "hostile_refuse", `{"mib":64}`); err == nil {
		t.Error("a call answered with HTTP 400 did not fail")
	}
	if w := <-s.ended; w.complete {
		t.Errorf("the host read all %d MiB of an HTTP 400 reply", w.bytes>>20)
	}
}

// A stream that goes on after it answered its call is closed by the host: what
// the server sends after the answer is not read. (The SDK would read it only to
// discard it, and the requests among it, counted by the gate as being answered,
// would never be answered: past 16 of them, every request of the server's would
// be refused.)
func TestRemoteStreamEndsWithItsAnswer(t *testing.T) {
	h := newBareHost(t)
	s := startHostileHTTP(t, 0)
	s.release()
	if _, err := h.startHostile(t, s, nil); err != nil {
		t.Fatal(err)
	}
	if st := mustSettle(t, h, "hostile_tail", `{"n":20}`); st.Text() != "tail" {
		t.Errorf("tail: %q", st.Text())
	}
	if st := mustSettle(t, h, "hostile_ping", `{"n":1}`); st.Text() != "pinged" {
		t.Errorf("ping: %q", st.Text())
	}
	var how map[string]string
	proctest.Until(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		how = maps.Clone(s.how)
		return how["ping-0"] != ""
	})
	if how["ping-0"] != "answer" || len(how) != 1 {
		t.Errorf("the server's requests were answered so: %v; want the one ping after the stream answered, and nothing of what followed the answer", how)
	}
}

// A remote server that sends hundreds of requests of its own at once, and holds
// the POSTs that answer them, has at most 16 of them answered at once (and one
// POST of the gate's refusals): the others are refused, the refusals past those
// waiting to be POSTed dropped (one log line, then their count); the call's own
// answer arrives meanwhile, and so do the host's other calls.
func TestRemoteRequestsAreBounded(t *testing.T) {
	h := newBareHost(t)
	s := startHostileHTTP(t, 0)
	if _, err := h.startHostile(t, s, nil); err != nil {
		t.Fatal(err)
	}
	if st := mustSettle(t, h, "hostile_ping", `{"n":500}`); st.Text() != "pinged" {
		t.Errorf("ping: %q", st.Text())
	}
	if st := mustSettle(t, h, "hostile_echo", `{}`); st.Text() != "echo" {
		t.Errorf("echo while the answers are held: %q", st.Text())
	}
	_, _, most := s.counts()
	s.release()
	// The held POSTs are let through; a call after them still completes.
	if st := mustSettle(t, h, "hostile_echo", `{}`); st.Text() != "echo" {
		t.Errorf("echo afterwards: %q", st.Text())
	}
	answers, refusals, _ := s.counts()
	t.Logf("500 pings: at most %d answers POSTed at once; %d answered, %d refusals received", most, answers, refusals)
	if most > 17 {
		t.Errorf("%d of the host's answers were POSTed at once; want at most 16 answers and one POST of refusals", most)
	}
	if n := strings.Count(h.logs.String(), "dropping the answers to refused requests"); n != 1 {
		t.Errorf("%d log lines say refusals were dropped; want one, its count to follow", n)
	}
}

// A remote server that sends the host to another origin, by a redirect or as
// its HTTP+SSE message endpoint, is not followed: the session fails with an
// *mcp.OriginError, and the other origin receives nothing, not the server's
// credentials.
func TestRemoteOtherOriginsAreNotReached(t *testing.T) {
	var mu sync.Mutex
	var reached []string
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		reached = append(reached, r.Method+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		http.NotFound(w, r)
	}))
	t.Cleanup(other.Close)
	for _, tc := range []struct {
		name, transport string
		handler         http.HandlerFunc
	}{
		{"Redirect", mcp.TransportStreamable, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, other.URL+"/mcp", http.StatusTemporaryRedirect)
		}},
		{"SSEEndpoint", mcp.TransportSSE, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "event: endpoint\ndata: %s/messages\n\n", other.URL)
			http.NewResponseController(w).Flush()
			<-r.Context().Done()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			reached = nil
			mu.Unlock()
			srv := httptest.NewServer(tc.handler)
			t.Cleanup(func() {
				srv.CloseClientConnections()
				srv.Close()
			})
			h := newBareHost(t)
			_, err := mcp.Start(t.Context(), h.root, h.remote("moved", srv.URL+"/mcp", func(c *mcp.Config) {
				c.Transport = tc.transport
				c.Headers = map[string]string{"Authorization": "Bearer s3cret"}
			}), mcp.Target{Registry: h.reg, Location: h.loc}, 1)
			var origin *mcp.OriginError
			if !errors.As(err, &origin) || origin.Server != "moved" || !strings.Contains(err.Error(), other.URL) {
				t.Errorf("start = %v; want an *mcp.OriginError naming the server and where it sent the host", err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(reached) > 0 {
				t.Errorf("the other origin received %q", reached)
			}
		})
	}
}
