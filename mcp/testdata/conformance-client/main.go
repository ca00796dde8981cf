// Command conformance-client is toolhost's MCP client for the official conformance
// suite's client scenarios (@modelcontextprotocol/conformance): the runner starts it
// with the scenario's server URL as its argument and the scenario's name in
// MCP_CONFORMANCE_SCENARIO (its context, as JSON, in MCP_CONFORMANCE_CONTEXT).
//
// It hosts the server as a toolhost remote MCP source (mcp.Supervise into a
// registry), so every request goes through the code a Location uses; tools are
// called through the registry's settlement pipeline. Authorization scenarios log
// in first with mcp.Login, playing the browser by following the authorization URL
// to the loopback redirect, then connect with the stored token.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/toolhost/toolhost/mcp"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/scope"
	"github.com/toolhost/toolhost/sdk"
)

const server = "conf"

func main() {
	log.SetFlags(0)
	if len(os.Args) != 2 {
		log.Fatalf("usage: %s SERVER_URL (with MCP_CONFORMANCE_SCENARIO set)", os.Args[0])
	}
	scenario := os.Getenv("MCP_CONFORMANCE_SCENARIO")
	var cctx map[string]any
	_ = json.Unmarshal([]byte(os.Getenv("MCP_CONFORMANCE_CONTEXT")), &cctx)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := run(ctx, os.Args[1], scenario, cctx); err != nil {
		log.Fatalf("scenario %q: %v", scenario, err)
	}
}

func run(ctx context.Context, url, scenario string, cctx map[string]any) error {
	tmp, err := os.MkdirTemp("", "toolhost-conformance-client-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	logger := hclog.New(&hclog.LoggerOptions{Name: "toolhost", Level: hclog.Debug, Output: os.Stderr})
	cfg := mcp.Config{Name: server, Remote: mcp.Remote{URL: url, TokenDir: tmp}, Logger: logger, StartTimeout: 20 * time.Second}

	if strings.HasPrefix(scenario, "auth/") {
		opts := mcp.LoginOptions{Out: os.Stderr, Open: follow}
		opts.ClientID, _ = cctx["client_id"].(string)
		opts.ClientSecret, _ = cctx["client_secret"].(string)
		if err := mcp.Login(ctx, cfg, opts); err != nil && !errors.Is(err, mcp.ErrNoAuthorizationNeeded) {
			return err
		}
	}

	storage, err := registry.OpenStorage(tmp, registry.StorageOptions{})
	if err != nil {
		return err
	}
	reg, err := registry.New(registry.Options{Storage: storage})
	if err != nil {
		return err
	}
	const loc = "/conformance"
	release, err := reg.OpenLocation(loc, registry.Limits{})
	if err != nil {
		return err
	}
	defer release()
	root := scope.New(context.Background())
	defer root.Close(context.Background())
	if _, err := mcp.Supervise(ctx, root, cfg, mcp.Target{Registry: reg, Location: loc}); err != nil {
		return err
	}

	call := func(tool string, args string) error {
		q, err := reg.Prepare(loc)
		if err != nil {
			return err
		}
		cctx := sdk.WithInteractor(ctx, acceptDefaults{})
		s, err := q.Settle(cctx, registry.Call{Name: server + "_" + tool, Input: []byte(args), Invocation: sdk.Invocation{ToolCallID: "conformance"}})
		if err != nil {
			return err
		}
		if s.Outcome != registry.Completed {
			return fmt.Errorf("call %s: %s: %s", tool, s.Outcome, s.Text())
		}
		return nil
	}
	switch scenario {
	case "tools_call":
		return call("add_numbers", `{"a":5,"b":3}`)
	case "elicitation-sep1034-client-defaults":
		return call("test_client_elicitation_defaults", `{}`)
	case "sse-retry":
		return call("test_reconnection", `{}`)
	default:
		if strings.HasPrefix(scenario, "auth/") {
			return call("test-tool", `{}`)
		}
		return nil // initialize and the others: connecting and listing is the test
	}
}

// follow plays the person's browser: it follows the authorization URL through the
// authorization server's redirect to the loopback listener.
func follow(ctx context.Context, u string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return nil
}

// acceptDefaults answers every question by accepting the defaults its schema
// gives, as a person pressing "submit" on a pre-filled form would.
type acceptDefaults struct{}

func (acceptDefaults) Ask(_ context.Context, q sdk.Question) (sdk.Answer, error) {
	var schema struct {
		Properties map[string]struct {
			Default json.RawMessage `json:"default"`
		} `json:"properties"`
	}
	_ = json.Unmarshal(q.Schema, &schema)
	content := map[string]json.RawMessage{}
	for name, p := range schema.Properties {
		if p.Default != nil {
			content[name] = p.Default
		}
	}
	data, err := json.Marshal(content)
	if err != nil {
		return sdk.Answer{}, err
	}
	return sdk.Answer{Action: sdk.Accepted, Content: data}, nil
}

func (acceptDefaults) Sample(context.Context, sdk.SampleRequest) (sdk.SampleResult, error) {
	return sdk.SampleResult{}, &sdk.UnansweredError{Op: "sample", Reason: "the conformance client has no model"}
}
