package location_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/toolhost/toolhost/location"
)

// canonicalDir returns a canonical directory for a Location under test.
func canonicalDir(t testing.TB, dir string) string {
	t.Helper()
	c, err := location.Canonicalize(dir)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// writeConfig writes data as the config of a fresh Location and returns its
// directory and config file.
func writeConfig(t *testing.T, data string) (dir, file string) {
	t.Helper()
	dir = canonicalDir(t, t.TempDir())
	file = filepath.Join(dir, location.ConfigPath)
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, file
}

func TestLoadConfigDecodesFullExample(t *testing.T) {
	dir := canonicalDir(t, filepath.Join("testdata", "config", "full"))
	got, err := location.LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := &location.Config{
		WorkspaceID: "ws-example",
		Plugins: []location.PluginConfig{
			{
				Name:         "text",
				Path:         filepath.Join(dir, "bin", "text-plugin"),
				SHA256:       "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
				Options:      json.RawMessage(`{"greeting":"hello","limits":[1,2]}`),
				Env:          map[string]string{"TEXT_MODE": "plain", "_DEBUG": ""},
				StartTimeout: 10 * time.Second,
				StopGrace:    5 * time.Second,
			},
			{
				Name:    "slow",
				Source:  filepath.Join(filepath.Dir(dir), "plugins", "slow"),
				Trusted: true,
			},
		},
		MCPServers: []location.MCPServerConfig{
			{
				Name:    "everything",
				Remote:  location.Remote{Origin: filepath.Join(dir, location.ConfigPath) + " at /mcp_servers/0"},
				Command: "node",
				Args:    []string{"server.js", "--stdio"},
				Env:     map[string]string{"NODE_ENV": "production"},
				Dir:     dir,
				Timeout: 30 * time.Second,
			},
			{
				Name:    "local-mcp",
				Remote:  location.Remote{Origin: filepath.Join(dir, location.ConfigPath) + " at /mcp_servers/1"},
				Command: filepath.Join(dir, "scripts", "mcp.sh"),
				Dir:     dir,
			},
		},
		Tools: []location.ManifestToolConfig{
			{
				Name:           "wc",
				Description:    "Counts the lines of its input.",
				InputSchema:    json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
				OutputSchema:   json.RawMessage(`{"type":"string"}`),
				Command:        []string{"sh", "-c", "wc -l"},
				Dir:            dir,
				Env:            map[string]string{},
				Timeout:        10 * time.Second,
				MaxOutputBytes: 1048576,
			},
			{
				Name:        "count_words",
				Description: "Counts words with a script.",
				Command:     []string{filepath.Join(dir, "scripts", "count.sh"), "--words"},
				Dir:         filepath.Join(dir, "scripts"),
				Timeout:     90 * time.Second,
			},
		},
		Permission: []location.PermissionRule{
			{Action: "read", Resource: "*", Effect: location.EffectAllow},
			{Action: "bash", Resource: "rm *", Effect: location.EffectDeny},
			{Action: "edit", Resource: "*.go", Effect: location.EffectAsk},
		},
		ToolOutput: location.OutputLimits{MaxLines: 2000, MaxBytes: 51200},
	}
	if !reflect.DeepEqual(got, want) {
		gotJSON, _ := json.MarshalIndent(got, "", "  ")
		wantJSON, _ := json.MarshalIndent(want, "", "  ")
		t.Errorf("LoadConfig mismatch\ngot:\n%s\nwant:\n%s", gotJSON, wantJSON)
	}
}

func TestLoadConfigMissing(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
	}{
		{"NoToolhostDirIsEmptyConfig", func(*testing.T, string) {}},
		{"NoConfigFileIsEmptyConfig", func(t *testing.T, dir string) {
			if err := os.Mkdir(filepath.Join(dir, ".toolhost"), 0o755); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := canonicalDir(t, t.TempDir())
			tt.setup(t, dir)
			cfg, err := location.LoadConfig(dir)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(cfg, &location.Config{}) {
				t.Errorf("LoadConfig = %+v, want an empty Config", cfg)
			}
		})
	}
}

func TestLoadConfigFailures(t *testing.T) {
	t.Run("UnreadableConfigNamesFile", func(t *testing.T) {
		dir := canonicalDir(t, t.TempDir())
		file := filepath.Join(dir, location.ConfigPath)
		if err := os.MkdirAll(file, 0o755); err != nil { // a directory, not a file
			t.Fatal(err)
		}
		_, err := location.LoadConfig(dir)
		if err == nil {
			t.Fatal("LoadConfig succeeded on a directory")
		}
		if !strings.Contains(err.Error(), file) || !strings.HasPrefix(err.Error(), "location: ") {
			t.Errorf("error %q does not name %s with the package prefix", err, file)
		}
		var cerr *location.ConfigError
		if errors.As(err, &cerr) {
			t.Errorf("read failure reported as a ConfigError: %v", err)
		}
	})
	t.Run("RelativeDirIsRefused", func(t *testing.T) {
		if _, err := location.LoadConfig("relative/dir"); err == nil {
			t.Error("LoadConfig accepted a relative dir")
		}
		if _, err := location.ParseConfig("relative/dir", "", []byte(`{}`)); err == nil {
			t.Error("ParseConfig accepted a relative dir")
		}
	})
}

func TestParseConfigAccepts(t *testing.T) {
	dir := canonicalDir(t, t.TempDir())
	tests := []struct {
		name  string
		doc   string
		check func(t *testing.T, cfg *location.Config)
	}{
		{"EmptyObjectIsEmptyConfig", `{}`, func(t *testing.T, cfg *location.Config) {
			if !reflect.DeepEqual(cfg, &location.Config{}) {
				t.Errorf("got %+v, want an empty Config", cfg)
			}
		}},
		{"ByteOrderMarkIsIgnored", "\ufeff{\"workspace_id\": \"w\"}", func(t *testing.T, cfg *location.Config) {
			if cfg.WorkspaceID != "w" {
				t.Errorf("WorkspaceID = %q, want w", cfg.WorkspaceID)
			}
		}},
		{"IntegralNumbersInAnyNotation", `{"tool_output": {"max_lines": 8.0, "max_bytes": 5e3}}`, func(t *testing.T, cfg *location.Config) {
			if want := (location.OutputLimits{MaxLines: 8, MaxBytes: 5000}); cfg.ToolOutput != want {
				t.Errorf("ToolOutput = %+v, want %+v", cfg.ToolOutput, want)
			}
		}},
		{"SandboxBlock", `{"plugins": [{"name": "p", "path": "p", "require_sandbox": true,
			"sandbox": {"read": ["data"], "write": ["/tmp/out"], "network": true, "memory": "512MiB", "processes": 10, "open_files": 64, "cpus": 0.5}}]}`,
			func(t *testing.T, cfg *location.Config) {
				want := &location.SandboxConfig{Read: []string{filepath.Join(dir, "data")}, Write: []string{"/tmp/out"}, Network: true,
					MemoryBytes: 512 << 20, Processes: 10, OpenFiles: 64, CPUs: 0.5}
				if p := cfg.Plugins[0]; !p.RequireSandbox || !reflect.DeepEqual(p.Sandbox, want) {
					t.Errorf("sandbox = %+v (require %v), want %+v", p.Sandbox, p.RequireSandbox, want)
				}
			}},
		{"DurationsInGoSyntax", `{"plugins": [{"name": "p", "path": "p", "start_timeout": "1m30s", "stop_grace": "250ms"}],
			"mcp_servers": [{"name": "m", "command": "m", "timeout": "1.5h"}]}`, func(t *testing.T, cfg *location.Config) {
			if got := cfg.Plugins[0].StartTimeout; got != 90*time.Second {
				t.Errorf("StartTimeout = %v", got)
			}
			if got := cfg.Plugins[0].StopGrace; got != 250*time.Millisecond {
				t.Errorf("StopGrace = %v", got)
			}
			if got := cfg.MCPServers[0].Timeout; got != 90*time.Minute {
				t.Errorf("Timeout = %v", got)
			}
		}},
		{"AbsolutePluginPathKept", `{"plugins": [{"name": "p", "path": "/opt/bin/../plugin"}]}`, func(t *testing.T, cfg *location.Config) {
			if got := cfg.Plugins[0].Path; got != filepath.FromSlash("/opt/plugin") {
				t.Errorf("Path = %q, want /opt/plugin", got)
			}
		}},
		{"BarePluginPathIsRelativeToLocation", `{"plugins": [{"name": "p", "path": "plugin"}]}`, func(t *testing.T, cfg *location.Config) {
			if got, want := cfg.Plugins[0].Path, filepath.Join(dir, "plugin"); got != want {
				t.Errorf("Path = %q, want %q", got, want)
			}
		}},
		{"BareProgramLeftForPathLookup", `{"tools": [{"name": "t", "description": "d", "command": ["jq", "."]}]}`, func(t *testing.T, cfg *location.Config) {
			if got := cfg.Tools[0].Command; !reflect.DeepEqual(got, []string{"jq", "."}) {
				t.Errorf("Command = %q", got)
			}
		}},
		{"DirDefaultsToLocation", `{"mcp_servers": [{"name": "m", "command": "m"}]}`, func(t *testing.T, cfg *location.Config) {
			if got := cfg.MCPServers[0].Dir; got != dir {
				t.Errorf("Dir = %q, want %q", got, dir)
			}
		}},
		{"AbsoluteDirInsideLocation", `{"mcp_servers": [{"name": "m", "command": "m", "dir": ` + jsonString(filepath.Join(dir, "a", "..", "b")) + `}]}`, func(t *testing.T, cfg *location.Config) {
			if got, want := cfg.MCPServers[0].Dir, filepath.Join(dir, "b"); got != want {
				t.Errorf("Dir = %q, want %q", got, want)
			}
		}},
		{"DotDotThatStaysInsideIsAllowed", `{"tools": [{"name": "t", "description": "d", "command": ["x"], "dir": "a/../b"}]}`, func(t *testing.T, cfg *location.Config) {
			if got, want := cfg.Tools[0].Dir, filepath.Join(dir, "b"); got != want {
				t.Errorf("Dir = %q, want %q", got, want)
			}
		}},
		{"MCPServerAskLimits", `{"mcp_servers": [{"name": "m", "command": "m", "max_pending_asks": 2, "ask_burst": 5, "asks_per_minute": 3e1}, {"name": "n", "command": "n"}]}`, func(t *testing.T, cfg *location.Config) {
			m, n := cfg.MCPServers[0], cfg.MCPServers[1]
			if m.MaxPendingAsks != 2 || m.AskBurst != 5 || m.AsksPerMinute != 30 {
				t.Errorf("server m: max_pending_asks %d, ask_burst %d, asks_per_minute %d; want 2, 5, 30", m.MaxPendingAsks, m.AskBurst, m.AsksPerMinute)
			}
			if n.MaxPendingAsks != 0 || n.AskBurst != 0 || n.AsksPerMinute != 0 {
				t.Errorf("server n: %+v; want the ask limits unset (the defaults)", n)
			}
		}},
		{"SourcesShareNamesByConfig", `{"plugins": [{"name": "p", "path": "p", "overrides": ["read"], "max_tools": 10, "max_schema_bytes": 1e4, "call_timeout": "30s", "max_held_bytes": 33554432}],
			"mcp_servers": [{"name": "m", "command": "m", "overrides": ["m_x"], "max_tools": 5, "max_held_bytes": 16777216}],
			"tools": [{"name": "read", "description": "d", "command": ["x"], "overrides": ["read"]}],
			"permission": [{"action": "read", "resource": "*", "effect": "allow", "source": "builtin"}],
			"tool_output": {"quota_bytes": 1000000}}`, func(t *testing.T, cfg *location.Config) {
			p := cfg.Plugins[0]
			if want := (location.Sharing{Overrides: []string{"read"}, MaxTools: 10, MaxSchemaBytes: 10000}); !reflect.DeepEqual(p.Sharing, want) || p.CallTimeout != 30*time.Second || p.MaxHeldBytes != 32<<20 {
				t.Errorf("plugin = %+v, want %+v, a 30s call timeout and 32 MiB held", p, want)
			}
			if cfg.MCPServers[0].MaxHeldBytes != 16<<20 {
				t.Errorf("server max_held_bytes = %d, want 16 MiB", cfg.MCPServers[0].MaxHeldBytes)
			}
			if want := (location.Sharing{Overrides: []string{"m_x"}, MaxTools: 5}); !reflect.DeepEqual(cfg.MCPServers[0].Sharing, want) {
				t.Errorf("server sharing = %+v, want %+v", cfg.MCPServers[0].Sharing, want)
			}
			if got := cfg.Tools[0].Overrides; !reflect.DeepEqual(got, []string{"read"}) {
				t.Errorf("tool overrides = %q", got)
			}
			if got := cfg.Permission[0].Source; got != "builtin" {
				t.Errorf("rule source = %q", got)
			}
			if got := cfg.ToolOutput.QuotaBytes; got != 1000000 {
				t.Errorf("quota = %d", got)
			}
		}},
		{"SameNameAsPluginAndToolIsAllowed", `{"plugins": [{"name": "x", "path": "p"}], "tools": [{"name": "x", "description": "d", "command": ["x"]}]}`, func(t *testing.T, cfg *location.Config) {
			if len(cfg.Plugins) != 1 || len(cfg.Tools) != 1 {
				t.Errorf("got %d plugins and %d tools", len(cfg.Plugins), len(cfg.Tools))
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := location.ParseConfig(dir, "config.json", []byte(tt.doc))
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, cfg)
		})
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// problem is an expected ConfigProblem: its exact path and fragments of its message.
type problem struct {
	path string
	msg  []string
}

// checkConfigError asserts err is a *ConfigError for file that contains every
// wanted problem, and that its message names the file.
func checkConfigError(t *testing.T, err error, file string, want ...problem) *location.ConfigError {
	t.Helper()
	if err == nil {
		t.Fatal("got no error")
	}
	var cerr *location.ConfigError
	if !errors.As(err, &cerr) {
		t.Fatalf("error %v (%T) is not a *ConfigError", err, err)
	}
	if cerr.File != file {
		t.Errorf("File = %q, want %q", cerr.File, file)
	}
	if !strings.HasPrefix(err.Error(), "location: invalid config "+file+":\n  ") {
		t.Errorf("error does not start with the package prefix and the file:\n%s", err)
	}
	if len(cerr.Problems) == 0 {
		t.Errorf("ConfigError has no problems")
	}
	for _, w := range want {
		found := false
		for _, p := range cerr.Problems {
			if p.Path == w.path && containsAll(p.Message, w.msg) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("no problem at %q containing %q in:\n%s", w.path, w.msg, err)
		}
	}
	return cerr
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

func TestParseConfigRejects(t *testing.T) {
	const okPlugin = `{"name": "p", "path": "p"}`
	tests := []struct {
		name string
		doc  string
		want []problem
	}{
		// syntax
		{"InvalidJSONNamesLineAndColumn", "{\n  \"plugins\": [\n    {\"name\": \"a\",}\n  ]\n}",
			[]problem{{"", []string{"invalid JSON at 3:18", "invalid character '}'"}}}},
		{"TruncatedJSON", `{"plugins": [`, []problem{{"", []string{"invalid JSON at 1:14", "unexpected end of input"}}}},
		{"TrailingContent", "{}\n{}", []problem{{"", []string{"invalid JSON at 2:1", "after the top-level value"}}}},
		{"EmptyDocument", "  \n", []problem{{"", []string{"invalid JSON", "empty document"}}}},
		{"ColumnsCountCharacters", `{"workspace_id": "é",,}`, []problem{{"", []string{"invalid JSON at 1:22"}}}},

		// structure
		{"DocumentNotAnObject", `[]`, []problem{{"", []string{"must be a JSON object, got array"}}}},
		{"UnknownTopLevelKey", `{"plugin": []}`, []problem{{"/plugin", []string{`unknown property "plugin"`}}}},
		{"UnknownNestedKey", `{"plugins": [{"name": "p", "path": "p", "trusted_": true}]}`,
			[]problem{{"/plugins/0/trusted_", []string{`unknown property "trusted_"`}}}},
		{"UnknownKeyWithSlashIsEscaped", `{"tool_output": {"a/b~c": 1}}`,
			[]problem{{"/tool_output/a~1b~0c", []string{`unknown property "a/b~c"`}}}},
		{"CaseMattersForKeys", `{"Plugins": []}`, []problem{{"/Plugins", []string{"unknown property"}}}},
		{"WrongTypeOfList", `{"plugins": {}}`, []problem{{"/plugins", []string{"got object, want array"}}}},
		{"WrongTypeOfFlag", `{"plugins": [{"name": "p", "path": "p", "trusted": "yes"}]}`,
			[]problem{{"/plugins/0/trusted", []string{"got string, want boolean"}}}},
		{"WrongTypeOfArg", `{"mcp_servers": [{"name": "m", "command": "m", "args": ["a", 1]}]}`,
			[]problem{{"/mcp_servers/0/args/1", []string{"got number, want string"}}}},
		{"OptionsNotObject", `{"plugins": [{"name": "p", "path": "p", "options": [1]}]}`,
			[]problem{{"/plugins/0/options", []string{"got array, want object"}}}},
		{"SandboxUnknownKey", `{"mcp_servers": [{"name": "m", "command": "m", "sandbox": {"reed": []}}]}`,
			[]problem{{"/mcp_servers/0/sandbox/reed", []string{`unknown property "reed"`}}}},
		{"SandboxMemoryTooSmall", `{"tools": [{"name": "t", "description": "d", "command": ["x"], "sandbox": {"memory": "10KiB"}}]}`,
			[]problem{{"/tools/0/sandbox/memory", []string{"at least 1MiB"}}}},
		{"SandboxCPUsTooFew", `{"tools": [{"name": "t", "description": "d", "command": ["x"], "sandbox": {"cpus": 0.001}}]}`,
			[]problem{{"/tools/0/sandbox/cpus", []string{"0.01"}}}},
		{"InputSchemaNotObject", `{"tools": [{"name": "t", "description": "d", "command": ["x"], "input_schema": true}]}`,
			[]problem{{"/tools/0/input_schema", []string{"got boolean, want object"}}}},
		{"MissingRequired", `{"tools": [{"command": ["x"]}]}`, []problem{
			{"/tools/0", []string{`missing required property "name"`}},
			{"/tools/0", []string{`missing required property "description"`}},
		}},

		// names
		{"NameStartingWithDigit", `{"plugins": [{"name": "1text", "path": "p"}]}`,
			[]problem{{"/plugins/0/name", []string{`invalid name "1text"`}}}},
		{"NameWithSpace", `{"mcp_servers": [{"name": "my server", "command": "m"}]}`,
			[]problem{{"/mcp_servers/0/name", []string{`invalid name "my server"`}}}},
		{"NameTooLong", `{"tools": [{"name": "a` + strings.Repeat("b", 64) + `", "description": "d", "command": ["x"]}]}`,
			[]problem{{"/tools/0/name", []string{"invalid name"}}}},
		{"DuplicatePluginNames", `{"plugins": [` + okPlugin + `, ` + okPlugin + `]}`,
			[]problem{{"/plugins/1/name", []string{`duplicate name "p"`, "/plugins/0"}}}},
		{"DuplicateNameAcrossPluginsAndMCPServers", `{"plugins": [` + okPlugin + `], "mcp_servers": [{"name": "p", "command": "m"}]}`,
			[]problem{{"/mcp_servers/0/name", []string{`duplicate name "p"`, "already used by /plugins/0"}}}},
		{"DuplicateToolNames", `{"tools": [{"name": "t", "description": "d", "command": ["x"]}, {"name": "t", "description": "d", "command": ["y"]}]}`,
			[]problem{{"/tools/1/name", []string{`duplicate name "t"`, "/tools/0"}}}},

		// plugin binary
		{"PathAndSourceBoth", `{"plugins": [{"name": "p", "path": "p", "source": "s"}]}`,
			[]problem{{"/plugins/0", []string{`"path", "source" and "module" are mutually exclusive`}}}},
		{"PathAndSourceNeither", `{"plugins": [{"name": "p"}]}`,
			[]problem{{"/plugins/0", []string{`missing "path"`, `"source"`, `or "module"`}}}},
		{"SHA256NotHex", `{"plugins": [{"name": "p", "path": "p", "sha256": "` + strings.Repeat("z", 64) + `"}]}`,
			[]problem{{"/plugins/0/sha256", []string{"invalid sha256", "64 lowercase hex digits"}}}},
		{"SHA256Uppercase", `{"plugins": [{"name": "p", "path": "p", "sha256": "` + strings.Repeat("A", 64) + `"}]}`,
			[]problem{{"/plugins/0/sha256", []string{"invalid sha256"}}}},
		{"SHA256TooShort", `{"plugins": [{"name": "p", "path": "p", "sha256": "abc"}]}`,
			[]problem{{"/plugins/0/sha256", []string{`invalid sha256 "abc"`}}}},
		{"SHA256WithSource", `{"plugins": [{"name": "p", "source": "s", "sha256": "` + strings.Repeat("a", 64) + `"}]}`,
			[]problem{{"/plugins/0/sha256", []string{`"sha256" requires "path"`}}}},
		{"EmptyPath", `{"plugins": [{"name": "p", "path": ""}]}`,
			[]problem{{"/plugins/0/path", []string{"must not be empty"}}}},

		// durations
		{"DurationWithoutUnit", `{"plugins": [{"name": "p", "path": "p", "start_timeout": "10"}]}`,
			[]problem{{"/plugins/0/start_timeout", []string{`invalid duration "10"`}}}},
		{"DurationNegative", `{"mcp_servers": [{"name": "m", "command": "m", "timeout": "-1s"}]}`,
			[]problem{{"/mcp_servers/0/timeout", []string{`invalid duration "-1s"`}}}},
		{"DurationZero", `{"plugins": [{"name": "p", "path": "p", "stop_grace": "0s"}]}`,
			[]problem{{"/plugins/0/stop_grace", []string{`invalid duration "0s"`, "must be positive"}}}},
		{"DurationOverflow", `{"tools": [{"name": "t", "description": "d", "command": ["x"], "timeout": "9999999999h"}]}`,
			[]problem{{"/tools/0/timeout", []string{`invalid duration "9999999999h"`}}}},
		{"DurationNotString", `{"tools": [{"name": "t", "description": "d", "command": ["x"], "timeout": 10}]}`,
			[]problem{{"/tools/0/timeout", []string{"got number, want string"}}}},

		// permission
		{"BadEffect", `{"permission": [{"action": "read", "resource": "*", "effect": "permit"}]}`,
			[]problem{{"/permission/0/effect", []string{`got "permit"`, `"allow", "deny", "ask"`}}}},
		{"EmptyAction", `{"permission": [{"action": "", "resource": "*", "effect": "allow"}]}`,
			[]problem{{"/permission/0/action", []string{"must not be empty"}}}},
		{"MissingEffect", `{"permission": [{"action": "read", "resource": "*"}]}`,
			[]problem{{"/permission/0", []string{`missing required property "effect"`}}}},

		// tool_output and counts
		{"ToolOutputZero", `{"tool_output": {"max_lines": 0}}`,
			[]problem{{"/tool_output/max_lines", []string{"got 0, want at least 8"}}}},
		{"ToolOutputBelowThePreviewFloors", `{"tool_output": {"max_lines": 2, "max_bytes": 1000}}`,
			[]problem{{"/tool_output/max_bytes", []string{"got 1000, want at least 1024"}}, {"/tool_output/max_lines", []string{"got 2, want at least 8"}}}},
		{"ToolOutputNegative", `{"tool_output": {"max_bytes": -5}}`,
			[]problem{{"/tool_output/max_bytes", []string{"got -5, want at least 1024"}}}},
		{"ToolOutputFraction", `{"tool_output": {"max_bytes": 1.5}}`,
			[]problem{{"/tool_output/max_bytes", []string{"got number, want integer"}}}},
		{"ToolOutputHuge", `{"tool_output": {"max_bytes": 1e300}}`,
			[]problem{{"/tool_output/max_bytes", []string{"want at most 9007199254740991"}}}},
		{"MaxOutputBytesZero", `{"tools": [{"name": "t", "description": "d", "command": ["x"], "max_output_bytes": 0}]}`,
			[]problem{{"/tools/0/max_output_bytes", []string{"want at least 1"}}}},

		// env and commands
		{"EnvKeyStartsWithDigit", `{"plugins": [{"name": "p", "path": "p", "env": {"1A": "x"}}]}`,
			[]problem{{"/plugins/0/env/1A", []string{`invalid environment variable name "1A"`}}}},
		{"EnvKeyWithEquals", `{"mcp_servers": [{"name": "m", "command": "m", "env": {"A=B": "x"}}]}`,
			[]problem{{"/mcp_servers/0/env/A=B", []string{"invalid environment variable name"}}}},
		{"EnvValueNotString", `{"tools": [{"name": "t", "description": "d", "command": ["x"], "env": {"A": 1}}]}`,
			[]problem{{"/tools/0/env/A", []string{"got number, want string"}}}},
		{"EmptyCommand", `{"tools": [{"name": "t", "description": "d", "command": []}]}`,
			[]problem{{"/tools/0/command", []string{"must not be empty"}}}},
		{"EmptyCommandElement", `{"tools": [{"name": "t", "description": "d", "command": ["sh", ""]}]}`,
			[]problem{{"/tools/0/command/1", []string{"must not be empty"}}}},
		{"CommandNotArray", `{"tools": [{"name": "t", "description": "d", "command": "sh -c x"}]}`,
			[]problem{{"/tools/0/command", []string{"got string, want array"}}}},
		{"EmptyMCPCommand", `{"mcp_servers": [{"name": "m", "command": ""}]}`,
			[]problem{{"/mcp_servers/0/command", []string{"must not be empty"}}}},

		// sharing names and limits
		{"OverrideIsNotAName", `{"plugins": [{"name": "p", "path": "p", "overrides": ["1bad"]}]}`,
			[]problem{{"/plugins/0/overrides/0", []string{`invalid name "1bad"`}}}},
		{"OverrideListedTwice", `{"mcp_servers": [{"name": "m", "command": "m", "overrides": ["m_x", "m_x"]}]}`,
			[]problem{{"/mcp_servers/0/overrides", []string{"items at 0 and 1 are equal"}}}},
		{"ManifestToolOverridesAnotherName", `{"tools": [{"name": "t", "description": "d", "command": ["x"], "overrides": ["read"]}]}`,
			[]problem{{"/tools/0/overrides/0", []string{`only its own name "t", not "read"`}}}},
		{"ZeroMaxTools", `{"plugins": [{"name": "p", "path": "p", "max_tools": 0}]}`,
			[]problem{{"/plugins/0/max_tools", []string{"want at least 1"}}}},
		{"ZeroMaxPendingAsks", `{"mcp_servers": [{"name": "m", "command": "m", "max_pending_asks": 0}]}`,
			[]problem{{"/mcp_servers/0/max_pending_asks", []string{`MCP server "m": max_pending_asks is 0; want an integer from 1 to 16`}}}},
		{"MaxPendingAsksPastWhatTheHostAnswers", `{"mcp_servers": [{"name": "m", "command": "m", "max_pending_asks": 17}]}`,
			[]problem{{"/mcp_servers/0/max_pending_asks", []string{`MCP server "m": max_pending_asks is 17`}}}},
		{"NegativeAskBurstAndHugeRate", `{"mcp_servers": [{"name": "m", "command": "m", "ask_burst": -1, "asks_per_minute": 1e300}]}`,
			[]problem{{"/mcp_servers/0/ask_burst", []string{`MCP server "m": ask_burst is -1; want an integer from 1 to 1000000`}},
				{"/mcp_servers/0/asks_per_minute", []string{`MCP server "m": asks_per_minute is`, "want an integer from 1 to 1000000"}}}},
		{"FractionalAsksPerMinute", `{"mcp_servers": [{"name": "m", "command": "m", "asks_per_minute": 0.5}]}`,
			[]problem{{"/mcp_servers/0/asks_per_minute", []string{"got number, want integer"}}}},
		{"BadCallTimeout", `{"plugins": [{"name": "p", "path": "p", "call_timeout": "soon"}]}`,
			[]problem{{"/plugins/0/call_timeout", []string{`invalid duration "soon"`}}}},
		{"ZeroQuota", `{"tool_output": {"quota_bytes": 0}}`,
			[]problem{{"/tool_output/quota_bytes", []string{"want at least 1"}}}},
		{"EmptyRuleSource", `{"permission": [{"action": "a", "resource": "*", "effect": "allow", "source": ""}]}`,
			[]problem{{"/permission/0/source", []string{"must not be empty"}}}},

		// working directories
		{"MCPDirEscapesWithDotDot", `{"mcp_servers": [{"name": "m", "command": "m", "dir": "../elsewhere"}]}`,
			[]problem{{"/mcp_servers/0/dir", []string{`directory "../elsewhere" is outside the Location directory`}}}},
		{"ToolDirEscapesAfterClean", `{"tools": [{"name": "t", "description": "d", "command": ["x"], "dir": "a/../../b"}]}`,
			[]problem{{"/tools/0/dir", []string{"outside the Location directory"}}}},
		{"ToolDirAbsoluteOutside", `{"tools": [{"name": "t", "description": "d", "command": ["x"], "dir": "/"}]}`,
			[]problem{{"/tools/0/dir", []string{`directory "/" is outside the Location directory`}}}},
		{"EmptyDir", `{"tools": [{"name": "t", "description": "d", "command": ["x"], "dir": ""}]}`,
			[]problem{{"/tools/0/dir", []string{"must not be empty"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := canonicalDir(t, t.TempDir())
			file := filepath.Join(dir, location.ConfigPath)
			cfg, err := location.ParseConfig(dir, file, []byte(tt.doc))
			if cfg != nil {
				t.Errorf("got a Config with the error: %+v", cfg)
			}
			checkConfigError(t, err, file, tt.want...)
		})
	}
}

func TestLoadConfigReportsEveryProblemSortedByPath(t *testing.T) {
	dir, file := writeConfig(t, `{
  "tool_output": {"max_lines": 0},
  "plugins": [
    {"name": "p", "path": "p"}, {"name": "p2", "path": "p"}, {"name": "p3", "path": "p"},
    {"name": "p4", "path": "p"}, {"name": "p5", "path": "p"}, {"name": "p6", "path": "p"},
    {"name": "p7", "path": "p"}, {"name": "p8", "path": "p"}, {"name": "p9", "path": "p"},
    {"name": "p10", "path": "p", "bogus": 1},
    {"name": "p11", "path": "p", "sha256": "x"}
  ],
  "permission": [{"action": "a", "resource": "r", "effect": "maybe"}],
  "typo": true
}`)
	_, err := location.LoadConfig(dir)
	cerr := checkConfigError(t, err, file,
		problem{"/plugins/9/bogus", []string{"unknown property"}},
		problem{"/plugins/10/sha256", []string{"invalid sha256"}},
		problem{"/permission/0/effect", []string{`got "maybe"`}},
		problem{"/tool_output/max_lines", []string{"want at least 8"}},
		problem{"/typo", []string{"unknown property"}},
	)
	var paths []string
	for _, p := range cerr.Problems {
		paths = append(paths, p.Path)
	}
	want := []string{"/permission/0/effect", "/plugins/9/bogus", "/plugins/10/sha256", "/tool_output/max_lines", "/typo"}
	if !reflect.DeepEqual(paths, want) {
		t.Errorf("problem paths = %q, want %q", paths, want)
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 1+len(want) {
		t.Errorf("want one line per problem after the header, got:\n%s", err)
	}
}

func TestParseConfigSemanticProblemsTogether(t *testing.T) {
	dir := canonicalDir(t, t.TempDir())
	_, err := location.ParseConfig(dir, "", []byte(`{
  "plugins": [{"name": "a", "path": "p", "start_timeout": "0s"}],
  "mcp_servers": [{"name": "a", "command": "m", "dir": ".."}],
  "tools": [{"name": "t", "description": "d", "command": ["x"], "dir": "/"}]
}`))
	checkConfigError(t, err, filepath.Join(dir, location.ConfigPath),
		problem{"/plugins/0/start_timeout", []string{"must be positive"}},
		problem{"/mcp_servers/0/name", []string{`duplicate name "a"`, "/plugins/0"}},
		problem{"/mcp_servers/0/dir", []string{"outside the Location directory"}},
		problem{"/tools/0/dir", []string{"outside the Location directory"}},
	)
}

func TestParseConfigWorkingDirSymlinks(t *testing.T) {
	root := canonicalDir(t, t.TempDir())
	dir := filepath.Join(root, "loc")
	outside := filepath.Join(root, "outside")
	for _, d := range []string{filepath.Join(dir, "real"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"out": outside, "in": filepath.Join(dir, "real")} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Skipf("symlinks unavailable: %v", err)
		}
	}
	file := filepath.Join(dir, location.ConfigPath)
	tool := func(d string) []byte {
		return []byte(`{"tools": [{"name": "t", "description": "d", "command": ["x"], "dir": ` + jsonString(d) + `}]}`)
	}

	t.Run("SymlinkOutsideIsRefused", func(t *testing.T) {
		_, err := location.ParseConfig(dir, file, tool("out"))
		checkConfigError(t, err, file, problem{"/tools/0/dir", []string{`directory "out" resolves to ` + outside, "outside the Location directory"}})
	})
	t.Run("SymlinkInsideResolves", func(t *testing.T) {
		cfg, err := location.ParseConfig(dir, file, tool("in"))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := cfg.Tools[0].Dir, filepath.Join(dir, "real"); got != want {
			t.Errorf("Dir = %q, want %q", got, want)
		}
	})
	t.Run("MissingDirIsKeptLexically", func(t *testing.T) {
		cfg, err := location.ParseConfig(dir, file, tool("not/yet"))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := cfg.Tools[0].Dir, filepath.Join(dir, "not", "yet"); got != want {
			t.Errorf("Dir = %q, want %q", got, want)
		}
	})
	t.Run("FileIsNotADirectory", func(t *testing.T) {
		_, err := location.ParseConfig(dir, file, tool("file"))
		checkConfigError(t, err, file, problem{"/tools/0/dir", []string{"is not a directory"}})
	})
}

func TestCanonicalize(t *testing.T) {
	root := canonicalDir(t, t.TempDir())
	if err := os.Mkdir(filepath.Join(root, "real"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "real"), filepath.Join(root, "link")); err != nil {
		t.Skipf("symlinks unavailable: %v", err)
	}

	t.Run("EvaluatesSymlinks", func(t *testing.T) {
		got, err := location.Canonicalize(filepath.Join(root, "link", ".", "..", "link"))
		if err != nil {
			t.Fatal(err)
		}
		if want := filepath.Join(root, "real"); got != want {
			t.Errorf("Canonicalize = %q, want %q", got, want)
		}
	})
	t.Run("MakesRelativeAbsolute", func(t *testing.T) {
		got, err := location.Canonicalize("testdata")
		if err != nil {
			t.Fatal(err)
		}
		if !filepath.IsAbs(got) {
			t.Errorf("Canonicalize = %q, want an absolute path", got)
		}
	})
	for name, path := range map[string]string{
		"RefusesMissing": filepath.Join(root, "missing"),
		"RefusesFile":    filepath.Join(root, "file"),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := location.Canonicalize(path)
			if err == nil || !strings.HasPrefix(err.Error(), "location: ") {
				t.Errorf("Canonicalize(%q) error = %v, want a location: error", path, err)
			}
		})
	}
}

// compileConfigSchema compiles ConfigSchema with a fresh compiler that cannot
// load anything, which also validates it against the draft 2020-12 metaschema.
func compileConfigSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(location.ConfigSchema()))
	if err != nil {
		t.Fatalf("ConfigSchema is not JSON: %v", err)
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		t.Fatalf("ConfigSchema is %T, want an object", doc)
	}
	if got := obj["$schema"]; got != "https://json-schema.org/draft/2020-12/schema" {
		t.Errorf("$schema = %v, want draft 2020-12", got)
	}
	id, _ := obj["$id"].(string)
	c := jsonschema.NewCompiler()
	c.UseLoader(jsonschema.SchemeURLLoader{})
	if err := c.AddResource(id, doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile(id)
	if err != nil {
		t.Fatalf("ConfigSchema does not compile: %v", err)
	}
	return sch
}

func TestConfigSchema(t *testing.T) {
	t.Run("IsValidDraft202012Schema", func(t *testing.T) {
		compileConfigSchema(t)
	})
	t.Run("ExampleConfigValidates", func(t *testing.T) {
		sch := compileConfigSchema(t)
		f, err := os.Open(filepath.Join("testdata", "config", "full", ".toolhost", "config.json"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		inst, err := jsonschema.UnmarshalJSON(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := sch.Validate(inst); err != nil {
			t.Errorf("example config does not validate: %v", err)
		}
	})
	t.Run("ReturnsACopy", func(t *testing.T) {
		a := location.ConfigSchema()
		a[0] = 'x'
		if b := location.ConfigSchema(); b[0] == 'x' {
			t.Error("modifying the result of ConfigSchema changed the schema")
		}
	})
}

func FuzzParseConfig(f *testing.F) {
	example, err := os.ReadFile(filepath.Join("testdata", "config", "full", ".toolhost", "config.json"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(example)
	for _, seed := range []string{
		``, `{}`, `[]`, `null`, `{"plugins": [{"name": "p"}]}`,
		`{"plugins": [{"name": "p", "path": "p", "source": "s", "sha256": "x"}]}`,
		`{"tool_output": {"max_lines": 1e400, "max_bytes": -0.0}}`,
		`{"tools": [{"name": "t", "description": "d", "command": ["./x"], "dir": "../.."}]}`,
		`{"mcp_servers": [{"name": "m", "command": "m", "env": {"": ""}, "timeout": "1µs"}]}`,
		`{"permission": [{"action": "a", "resource": "r", "effect": "ask"}], "workspace_id": ""}`,
		"{\"a\":\n\"\xff\"}",
	} {
		f.Add([]byte(seed))
	}
	dir := canonicalDir(f, f.TempDir())
	file := filepath.Join(dir, location.ConfigPath)
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := location.ParseConfig(dir, file, data)
		if err == nil {
			if cfg == nil {
				t.Fatal("ParseConfig returned neither a Config nor an error")
			}
			return
		}
		if cfg != nil {
			t.Fatal("ParseConfig returned a Config with an error")
		}
		var cerr *location.ConfigError
		if !errors.As(err, &cerr) {
			t.Fatalf("error %v (%T) is not a *ConfigError", err, err)
		}
		if len(cerr.Problems) == 0 || !strings.Contains(err.Error(), file) {
			t.Fatalf("ConfigError without problems or file: %v", err)
		}
	})
}
