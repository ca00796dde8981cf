package registry_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolhost/toolhost/internal/hosttest"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sdk"
)

var (
	builtinSrc = registry.Source{Kind: "builtin"}
	pluginSrc  = registry.Source{Kind: "plugin", Name: "p", Generation: 1}
	otherSrc   = registry.Source{Kind: "plugin", Name: "q", Generation: 1}
)

func TestOwnership(t *testing.T) {
	one := func(name, answer string) map[string]sdk.Tool { return map[string]sdk.Tool{name: constTool(answer)} }
	t.Run("TakeOverWithoutOverrideIsRefusedNamingTheOwner", func(t *testing.T) {
		r := hosttest.Registry(t, registry.Options{})
		hosttest.OpenLocation(t, r, "/ws")
		register(t, r, registry.Batch{Location: "/ws", Source: builtinSrc, Tools: one("read", "builtin")})
		_, err := r.Register(registry.Batch{Location: "/ws", Source: pluginSrc, Tools: map[string]sdk.Tool{
			"read": constTool("impostor"), "other": constTool("other"),
		}})
		var rerr *registry.RegistrationError
		if !errors.As(err, &rerr) || !errors.Is(err, registry.ErrNameTaken) || rerr.Tool != "read" || rerr.Owner != "builtin" {
			t.Fatalf("err = %v; want a RegistrationError for read naming the builtin owner", err)
		}
		if !strings.Contains(err.Error(), `"overrides"`) {
			t.Errorf("error %q does not say how to allow it", err)
		}
		if got := answer(t, r, "/ws", "read"); got != "builtin" {
			t.Errorf("read answers %q, want the built-in", got)
		}
		if got := answer(t, r, "/ws", "other"); got != string(registry.Unknown) {
			t.Errorf("other = %q: the refused batch registered in part", got)
		}
	})
	t.Run("AllowedOverrideWinsAndCloseReveals", func(t *testing.T) {
		r := hosttest.Registry(t, registry.Options{})
		hosttest.OpenLocation(t, r, "/ws")
		register(t, r, registry.Batch{Location: "/ws", Source: builtinSrc, Tools: one("read", "builtin")})
		release := register(t, r, registry.Batch{Location: "/ws", Source: pluginSrc, Overrides: []string{"read"}, Tools: one("read", "plugin")})
		if got := answer(t, r, "/ws", "read"); got != "plugin" {
			t.Fatalf("read answers %q, want the allowed override", got)
		}
		release()
		if got := answer(t, r, "/ws", "read"); got != "builtin" {
			t.Fatalf("after the override closed read answers %q, want the built-in", got)
		}
	})
	t.Run("OverrideWinsWhateverTheOrder", func(t *testing.T) {
		r := hosttest.Registry(t, registry.Options{})
		hosttest.OpenLocation(t, r, "/ws")
		register(t, r, registry.Batch{Location: "/ws", Source: pluginSrc, Overrides: []string{"read"}, Tools: one("read", "plugin")})
		register(t, r, registry.Batch{Location: "/ws", Source: builtinSrc, Tools: one("read", "builtin")})
		if got := answer(t, r, "/ws", "read"); got != "plugin" {
			t.Fatalf("read answers %q; the owner registering later must not shadow the override", got)
		}
	})
	t.Run("ThirdSourceIsStillRefused", func(t *testing.T) {
		r := hosttest.Registry(t, registry.Options{})
		hosttest.OpenLocation(t, r, "/ws")
		register(t, r, registry.Batch{Location: "/ws", Source: builtinSrc, Tools: one("read", "builtin")})
		register(t, r, registry.Batch{Location: "/ws", Source: pluginSrc, Overrides: []string{"read"}, Tools: one("read", "plugin")})
		_, err := r.Register(registry.Batch{Location: "/ws", Source: otherSrc, Tools: one("read", "q")})
		var rerr *registry.RegistrationError
		if !errors.As(err, &rerr) || rerr.Owner != "builtin" {
			t.Fatalf("err = %v; want refused, naming the built-in", err)
		}
	})
	t.Run("SameSourceOverlays", func(t *testing.T) {
		r := hosttest.Registry(t, registry.Options{})
		hosttest.OpenLocation(t, r, "/ws")
		register(t, r, registry.Batch{Location: "/ws", Source: pluginSrc, Tools: one("x", "gen1")})
		next := pluginSrc
		next.Generation++
		release := register(t, r, registry.Batch{Location: "/ws", Source: next, Tools: one("x", "gen2")})
		if got := answer(t, r, "/ws", "x"); got != "gen2" {
			t.Fatalf("x answers %q, want the later generation", got)
		}
		release()
		if got := answer(t, r, "/ws", "x"); got != "gen1" {
			t.Fatalf("x answers %q after close, want gen1 revealed", got)
		}
	})
	t.Run("ApplicationPlacementHasNoOwners", func(t *testing.T) {
		r := hosttest.Registry(t, registry.Options{})
		register(t, r, registry.Batch{Source: builtinSrc, Tools: one("read", "a")})
		register(t, r, registry.Batch{Source: pluginSrc, Tools: one("read", "b")})
		if got := answer(t, r, registry.Application, "read"); got != "b" {
			t.Fatalf("read answers %q, want the latest", got)
		}
	})
}

func TestReplace(t *testing.T) {
	src := registry.Source{Kind: "mcp", Name: "srv", Generation: 1}
	t.Run("KeepsTheSlotBeneathALaterOverride", func(t *testing.T) {
		r := hosttest.Registry(t, registry.Options{})
		hosttest.OpenLocation(t, r, "/ws")
		g, err := r.Add(registry.Batch{Location: "/ws", Source: src, Tools: map[string]sdk.Tool{"srv_x": constTool("v1")}})
		if err != nil {
			t.Fatal(err)
		}
		register(t, r, registry.Batch{Location: "/ws", Source: pluginSrc, Overrides: []string{"srv_x"}, Tools: map[string]sdk.Tool{"srv_x": constTool("plugin")}})
		g2, err := g.Replace(registry.Batch{Location: "/ws", Source: src, Tools: map[string]sdk.Tool{"srv_x": withDescription(constTool("v2"), "changed")}})
		if err != nil {
			t.Fatal(err)
		}
		if got := answer(t, r, "/ws", "srv_x"); got != "plugin" {
			t.Fatalf("srv_x answers %q after the replace, want the override", got)
		}
		if _, err := g.Replace(registry.Batch{Location: "/ws", Source: src, Tools: map[string]sdk.Tool{"srv_x": constTool("v3")}}); !errors.Is(err, registry.ErrReleased) {
			t.Errorf("replacing a superseded registration: err = %v, want ErrReleased", err)
		}
		g2.Release()
		q, _ := r.Prepare("/ws")
		if len(q.Definitions()) != 1 {
			t.Errorf("definitions after release = %v, want the plugin's only", q.Definitions())
		}
	})
	t.Run("RefusedReplaceLeavesTheOldInPlace", func(t *testing.T) {
		r := hosttest.Registry(t, registry.Options{})
		hosttest.OpenLocation(t, r, "/ws")
		register(t, r, registry.Batch{Location: "/ws", Source: builtinSrc, Tools: map[string]sdk.Tool{"read": constTool("builtin")}})
		g, err := r.Add(registry.Batch{Location: "/ws", Source: src, Tools: map[string]sdk.Tool{"srv_x": constTool("v1")}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = g.Replace(registry.Batch{Location: "/ws", Source: src, Tools: map[string]sdk.Tool{"srv_x": constTool("v2"), "read": constTool("r")}})
		if !errors.Is(err, registry.ErrNameTaken) {
			t.Fatalf("err = %v, want ErrNameTaken", err)
		}
		if got := answer(t, r, "/ws", "srv_x"); got != "v1" {
			t.Fatalf("srv_x answers %q, want the unreplaced v1", got)
		}
	})
}

func TestSourceLimits(t *testing.T) {
	tools := func(n int, schemaPad int) map[string]sdk.Tool {
		m := map[string]sdk.Tool{}
		for i := range n {
			m[fmt.Sprintf("t%d", i)] = sdk.Tool{
				Description: strings.Repeat("d", schemaPad),
				InputSchema: json.RawMessage(`{"type":"object"}`),
				Execute:     nopExecute,
			}
		}
		return m
	}
	for _, tt := range []struct {
		name   string
		batch  registry.Batch
		before int // tools the same source registered first, in another batch
		limit  string
		value  int64
		max    int64
	}{
		{name: "TooManyToolsByDefault", batch: registry.Batch{Tools: tools(257, 0)}, limit: "max_tools", value: 257, max: 256},
		{name: "CountedAcrossBatchesOfTheSource", batch: registry.Batch{Tools: map[string]sdk.Tool{"z": constTool("z")}}, before: 256, limit: "max_tools", value: 257, max: 256},
		{name: "ConfiguredMaxTools", batch: registry.Batch{Tools: tools(3, 0), Limits: registry.SourceLimits{MaxTools: 2}}, limit: "max_tools", value: 3, max: 2},
		{name: "TooManySchemaBytesByDefault", batch: registry.Batch{Tools: tools(5, 1<<20)}, limit: "max_schema_bytes", value: 5 * (1<<20 + 17), max: 4 << 20},
		{name: "ConfiguredMaxSchemaBytes", batch: registry.Batch{Tools: tools(2, 100), Limits: registry.SourceLimits{MaxSchemaBytes: 200}}, limit: "max_schema_bytes", value: 2 * 117, max: 200},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := hosttest.Registry(t, registry.Options{})
			hosttest.OpenLocation(t, r, "/ws")
			if tt.before > 0 {
				register(t, r, registry.Batch{Location: "/ws", Source: pluginSrc, Tools: tools(tt.before, 0)})
			}
			tt.batch.Location, tt.batch.Source = "/ws", pluginSrc
			_, err := r.Register(tt.batch)
			var rerr *registry.RegistrationError
			var lerr *registry.LimitError
			if !errors.As(err, &rerr) || !errors.As(err, &lerr) {
				t.Fatalf("err = %v; want a RegistrationError with a LimitError", err)
			}
			if lerr.Limit != tt.limit || lerr.Value != tt.value || lerr.Max != tt.max {
				t.Errorf("limit error = %+v, want %s %d of %d", lerr, tt.limit, tt.value, tt.max)
			}
			if !strings.Contains(err.Error(), tt.limit) || !strings.Contains(err.Error(), fmt.Sprint(tt.max)) {
				t.Errorf("error %q does not name the limit and its maximum", err)
			}
			q, _ := r.Prepare("/ws")
			if len(q.Definitions()) != tt.before {
				t.Errorf("%d definitions, want %d: the refused batch registered in part", len(q.Definitions()), tt.before)
			}
		})
	}
	t.Run("ReleaseFreesTheCount", func(t *testing.T) {
		r := hosttest.Registry(t, registry.Options{})
		hosttest.OpenLocation(t, r, "/ws")
		release := register(t, r, registry.Batch{Location: "/ws", Source: pluginSrc, Tools: tools(256, 0)})
		release()
		register(t, r, registry.Batch{Location: "/ws", Source: pluginSrc, Tools: tools(256, 0)})
	})
	t.Run("NextGenerationCountsApart", func(t *testing.T) {
		r := hosttest.Registry(t, registry.Options{})
		hosttest.OpenLocation(t, r, "/ws")
		register(t, r, registry.Batch{Location: "/ws", Source: pluginSrc, Tools: tools(200, 0)})
		next := pluginSrc
		next.Generation++
		register(t, r, registry.Batch{Location: "/ws", Source: next, Tools: tools(200, 0)}) // a reload overlaps its predecessor
	})
}

func TestStorageQuota(t *testing.T) {
	dir := t.TempDir()
	st, err := registry.OpenStorage(dir, registry.StorageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := registry.New(registry.Options{Storage: st})
	if err != nil {
		t.Fatal(err)
	}
	release, err := r.OpenLocation("/ws", registry.Limits{MaxRetainedBytes: 150_000})
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	releaseB, err := r.OpenLocation("/other", registry.Limits{MaxRetainedBytes: 150_000})
	if err != nil {
		t.Fatal(err)
	}
	defer releaseB()
	big := strings.Repeat("0123456789\n", 10_000) // 110,000 bytes: over the preview limits
	tool := sdk.NewTool("big", func(context.Context, sdk.Invocation, struct{}) (string, error) { return big, nil })
	for _, loc := range []string{"/ws", "/other"} {
		register(t, r, registry.Batch{Location: loc, Source: pluginSrc, Tools: map[string]sdk.Tool{"big": tool}})
	}
	call := func(loc string) (*registry.Settlement, error) {
		q, err := r.Prepare(loc)
		if err != nil {
			t.Fatal(err)
		}
		return q.Settle(t.Context(), registry.Call{Name: "big", Invocation: sdk.Invocation{ToolCallID: "c"}})
	}
	if s, err := call("/ws"); err != nil || len(s.ManagedPaths) != 1 {
		t.Fatalf("first call = %+v, %v; want one retained file", s, err)
	}
	s, err := call("/ws")
	var oerr *registry.OperationalError
	var qerr *registry.QuotaError
	if !errors.As(err, &oerr) || !errors.Is(err, registry.ErrQuotaExceeded) || !errors.As(err, &qerr) || s != nil {
		t.Fatalf("second call = %+v, %v; want an operational quota error and no settlement", s, err)
	}
	if qerr.Quota != 150_000 || qerr.Used != 110_000 || !strings.Contains(err.Error(), "tool_output.quota_bytes") {
		t.Errorf("quota error = %v; want it to name the quota, the usage and what to do", err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*tool-output-*"))
	if len(files) != 1 {
		t.Errorf("%d files in storage, want only the first call's: the refused one left a partial file", len(files))
	}
	if got, err := st.Usage("/ws"); got != 110_000 || err != nil {
		t.Errorf("usage = %d, %v, want 110000", got, err)
	}
	if _, err := call("/other"); err != nil {
		t.Errorf("another Location sharing the storage: %v; its quota is its own", err)
	}
	// A managed file removed by anyone stops counting.
	for _, f := range files {
		os.Remove(f)
	}
	if _, err := call("/ws"); err != nil {
		t.Errorf("after the files were removed: %v", err)
	}
}

func TestStorageQuotaRemovesExpiredFilesFirst(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	var mu sync.Mutex
	st, err := registry.OpenStorage(dir, registry.StorageOptions{Retention: time.Hour, Now: func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := registry.New(registry.Options{Storage: st, Limits: registry.Limits{MaxRetainedBytes: 150_000}})
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("0123456789\n", 10_000)
	register(t, r, registry.Batch{Tools: map[string]sdk.Tool{"big": sdk.NewTool("big", func(context.Context, sdk.Invocation, struct{}) (string, error) { return big, nil })}})
	call := func() (*registry.Settlement, error) {
		q, _ := r.Prepare(registry.Application)
		return q.Settle(t.Context(), registry.Call{Name: "big", Invocation: sdk.Invocation{ToolCallID: "c"}})
	}
	first, err := call()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := call(); !errors.Is(err, registry.ErrQuotaExceeded) {
		t.Fatalf("second call: %v, want the quota exceeded", err)
	}
	mu.Lock()
	now = now.Add(2 * time.Hour)
	mu.Unlock()
	s, err := call()
	if err != nil {
		t.Fatalf("after the first file expired: %v; expired files must be removed before counting", err)
	}
	if _, err := os.Stat(first.ManagedPaths[0]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the expired file is still there: %v", err)
	}
	if got, _ := st.Usage(registry.Application); got != 110_000 || len(s.ManagedPaths) != 1 {
		t.Errorf("usage = %d, want only the new file's 110000 bytes", got)
	}
}
