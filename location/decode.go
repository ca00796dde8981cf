package location

// Decoding a schema-valid config document into a Config, and the semantic checks
// the schema cannot express.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/toolhost/toolhost/mcp"
	"github.com/toolhost/toolhost/registry"
)

// decoding

// The raw types mirror the schema. The schema has already rejected unknown
// and misspelt keys, so encoding/json's case-insensitive matching cannot
// accept anything the schema did not.
type rawConfig struct {
	WorkspaceID string          `json:"workspace_id"`
	Plugins     []rawPlugin     `json:"plugins"`
	MCPServers  []rawMCPServer  `json:"mcp_servers"`
	ImportMCP   []string        `json:"import_mcp_config"`
	Tools       []rawTool       `json:"tools"`
	Permission  []rawRule       `json:"permission"`
	ToolOutput  rawOutputLimits `json:"tool_output"`
}

type rawPlugin struct {
	Name           string            `json:"name"`
	Path           string            `json:"path"`
	Source         string            `json:"source"`
	Module         string            `json:"module"`
	Version        string            `json:"version"`
	Allow          bool              `json:"allow"`
	Trusted        bool              `json:"trusted"`
	Grants         []string          `json:"grants"`
	SHA256         string            `json:"sha256"`
	Options        json.RawMessage   `json:"options"`
	Env            map[string]string `json:"env"`
	StartTimeout   string            `json:"start_timeout"`
	StopGrace      string            `json:"stop_grace"`
	CallTimeout    string            `json:"call_timeout"`
	MaxHeldBytes   json.Number       `json:"max_held_bytes"`
	Sandbox        *rawSandbox       `json:"sandbox"`
	RequireSandbox bool              `json:"require_sandbox"`
	rawSharing
}

type rawSharing struct {
	Overrides      []string    `json:"overrides"`
	MaxTools       json.Number `json:"max_tools"`
	MaxSchemaBytes json.Number `json:"max_schema_bytes"`
}

type rawMCPServer struct {
	Name           string            `json:"name"`
	Command        string            `json:"command"`
	Args           []string          `json:"args"`
	Env            map[string]string `json:"env"`
	Dir            string            `json:"dir"`
	Timeout        string            `json:"timeout"`
	StartTimeout   string            `json:"start_timeout"`
	Sandbox        *rawSandbox       `json:"sandbox"`
	RequireSandbox bool              `json:"require_sandbox"`
	MaxHeldBytes   json.Number       `json:"max_held_bytes"`
	MaxPendingAsks json.Number       `json:"max_pending_asks"`
	AskBurst       json.Number       `json:"ask_burst"`
	AsksPerMinute  json.Number       `json:"asks_per_minute"`
	rawRemote
	rawSharing
}

type rawTool struct {
	Name           string            `json:"name"`
	Description    string            `json:"description"`
	InputSchema    json.RawMessage   `json:"input_schema"`
	OutputSchema   json.RawMessage   `json:"output_schema"`
	Command        []string          `json:"command"`
	Dir            string            `json:"dir"`
	Env            map[string]string `json:"env"`
	Timeout        string            `json:"timeout"`
	MaxOutputBytes json.Number       `json:"max_output_bytes"`
	Overrides      []string          `json:"overrides"`
	Sandbox        *rawSandbox       `json:"sandbox"`
	RequireSandbox bool              `json:"require_sandbox"`
}

type rawRule struct {
	Action   string `json:"action"`
	Resource string `json:"resource"`
	Effect   string `json:"effect"`
	Source   string `json:"source"`
}

// Counts are json.Number because JSON Schema counts 1.0 and 1e3 as integers,
// which encoding/json would refuse to put in an int.
type rawOutputLimits struct {
	MaxLines   json.Number `json:"max_lines"`
	MaxBytes   json.Number `json:"max_bytes"`
	QuotaBytes json.Number `json:"quota_bytes"`
}

// decoder converts a schema-valid rawConfig and collects the semantic problems
// the schema cannot express.
type decoder struct {
	dir      string
	file     string
	problems []ConfigProblem
	notes    []string // what an imported entry has that toolhost ignores
}

func (d *decoder) problem(path, format string, args ...any) {
	d.problems = append(d.problems, ConfigProblem{Path: path, Message: fmt.Sprintf(format, args...)})
}

func (d *decoder) config(raw *rawConfig) *Config {
	cfg := &Config{WorkspaceID: raw.WorkspaceID}
	// Plugins and MCP servers are all sources, so they share one namespace.
	sources := map[string]string{}
	for i, p := range raw.Plugins {
		at := fmt.Sprintf("/plugins/%d", i)
		d.unique(sources, p.Name, at)
		if p.Allow && p.Trusted {
			d.problem(at+"/allow", "%s", allowTrustedProblem)
		}
		pc := PluginConfig{
			Name:           p.Name,
			Module:         p.Module,
			Version:        p.Version,
			Allow:          p.Allow,
			Trusted:        p.Trusted,
			Grants:         p.Grants,
			SHA256:         p.SHA256,
			Options:        compact(p.Options),
			Env:            p.Env,
			StartTimeout:   d.duration(at+"/start_timeout", p.StartTimeout),
			StopGrace:      d.duration(at+"/stop_grace", p.StopGrace),
			CallTimeout:    d.duration(at+"/call_timeout", p.CallTimeout),
			MaxHeldBytes:   d.count(at+"/max_held_bytes", p.MaxHeldBytes),
			Sharing:        d.sharing(at, p.rawSharing),
			Sandbox:        d.sandbox(at+"/sandbox", p.Sandbox),
			RequireSandbox: p.RequireSandbox,
		}
		if p.Path != "" {
			pc.Path = d.resolve(p.Path)
		}
		if p.Source != "" {
			pc.Source = d.resolve(p.Source)
		}
		cfg.Plugins = append(cfg.Plugins, pc)
	}
	for i, m := range raw.MCPServers {
		at := fmt.Sprintf("/mcp_servers/%d", i)
		d.unique(sources, m.Name, at)
		command := m.Command
		if command != "" {
			command = d.program(command)
		}
		cfg.MCPServers = append(cfg.MCPServers, MCPServerConfig{
			Name:           m.Name,
			Remote:         d.remote(at, m),
			Command:        command,
			Args:           m.Args,
			Env:            m.Env,
			Dir:            d.workDir(at+"/dir", m.Dir),
			Timeout:        d.duration(at+"/timeout", m.Timeout),
			StartTimeout:   d.duration(at+"/start_timeout", m.StartTimeout),
			Sharing:        d.sharing(at, m.rawSharing),
			Sandbox:        d.sandbox(at+"/sandbox", m.Sandbox),
			RequireSandbox: m.RequireSandbox,
			MaxHeldBytes:   d.count(at+"/max_held_bytes", m.MaxHeldBytes),
			MaxPendingAsks: d.askLimit(at, m.Name, "max_pending_asks", m.MaxPendingAsks, mcp.MaxPendingAsks),
			AskBurst:       d.askLimit(at, m.Name, "ask_burst", m.AskBurst, MaxAskRate),
			AsksPerMinute:  d.askLimit(at, m.Name, "asks_per_minute", m.AsksPerMinute, MaxAskRate),
		})
	}
	cfg.ImportMCPConfig = slices.Clone(raw.ImportMCP)
	tools := map[string]string{}
	for i, t := range raw.Tools {
		at := fmt.Sprintf("/tools/%d", i)
		d.unique(tools, t.Name, at)
		command := slices.Clone(t.Command)
		command[0] = d.program(command[0])
		cfg.Tools = append(cfg.Tools, ManifestToolConfig{
			Name:           t.Name,
			Description:    t.Description,
			InputSchema:    compact(t.InputSchema),
			OutputSchema:   compact(t.OutputSchema),
			Command:        command,
			Dir:            d.workDir(at+"/dir", t.Dir),
			Env:            t.Env,
			Timeout:        d.duration(at+"/timeout", t.Timeout),
			MaxOutputBytes: d.count(at+"/max_output_bytes", t.MaxOutputBytes),
			Overrides:      slices.Clone(t.Overrides),
			Sandbox:        d.sandbox(at+"/sandbox", t.Sandbox),
			RequireSandbox: t.RequireSandbox,
		})
		for j, o := range t.Overrides {
			if o != t.Name {
				d.problem(fmt.Sprintf("%s/overrides/%d", at, j), "a manifest tool can take over only its own name %s, not %s", quote(t.Name), quote(o))
			}
		}
	}
	cfg.Permission = allowRules(cfg.Plugins) // module.go: the "allow" shorthand, first
	for _, r := range raw.Permission {
		cfg.Permission = append(cfg.Permission, PermissionRule{
			Action:   r.Action,
			Resource: r.Resource,
			Effect:   Effect(r.Effect),
			Source:   r.Source,
		})
	}
	cfg.ToolOutput = OutputLimits{
		MaxLines:   int(d.atLeast("/tool_output/max_lines", raw.ToolOutput.MaxLines, registry.MinMaxLines)),
		MaxBytes:   int(d.atLeast("/tool_output/max_bytes", raw.ToolOutput.MaxBytes, registry.MinMaxBytes)),
		QuotaBytes: d.count("/tool_output/quota_bytes", raw.ToolOutput.QuotaBytes),
	}
	return cfg
}

// sharing decodes a source's overrides and limits.
func (d *decoder) sharing(at string, raw rawSharing) Sharing {
	return Sharing{
		Overrides:      slices.Clone(raw.Overrides),
		MaxTools:       int(d.count(at+"/max_tools", raw.MaxTools)),
		MaxSchemaBytes: d.count(at+"/max_schema_bytes", raw.MaxSchemaBytes),
	}
}

// limits returns the registry's form of the source's limits.
func (s Sharing) limits() registry.SourceLimits {
	return registry.SourceLimits{MaxTools: s.MaxTools, MaxSchemaBytes: s.MaxSchemaBytes}
}

// unique records name as used by the entry at and reports an earlier use. Names
// that differ only by letter case are one name ("Text" would pass for "text").
func (d *decoder) unique(seen map[string]string, name, at string) {
	key := strings.ToLower(name)
	if prev, ok := seen[key]; ok {
		d.problem(at+"/name", "duplicate name %s: already used by %s (names that differ only by letter case are one)", quote(name), prev)
		return
	}
	seen[key] = at
}

// duration parses a Go duration that must be positive; "" is zero (unset).
func (d *decoder) duration(path, s string) time.Duration {
	if s == "" {
		return 0
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		d.problem(path, "invalid duration %s: %v", quote(s), strings.TrimPrefix(err.Error(), "time: "))
		return 0
	}
	if v <= 0 {
		d.problem(path, "invalid duration %s: must be positive", quote(s))
		return 0
	}
	return v
}

// count converts an integer the schema bounded to [1, 2^53-1]; "" is zero.
func (d *decoder) count(path string, n json.Number) int64 { return d.atLeast(path, n, 1) }

// atLeast converts an integer the schema bounded to [floor, 2^53-1]; "" is zero.
func (d *decoder) atLeast(path string, n json.Number, floor int64) int64 {
	if n == "" {
		return 0
	}
	r, ok := new(big.Rat).SetString(string(n))
	if !ok || !r.IsInt() || !r.Num().IsInt64() || r.Num().Int64() < floor {
		d.problem(path, "got %s, want an integer of at least %d", display(n), floor)
		return 0
	}
	return r.Num().Int64()
}

// askLimit decodes an MCP server's ask limit key, an integer from 1 to most; ""
// is zero (the default).
func (d *decoder) askLimit(at, server, key string, n json.Number, most int64) int {
	if n == "" {
		return 0
	}
	r, ok := new(big.Rat).SetString(string(n))
	if !ok || !r.IsInt() || r.Num().Cmp(big.NewInt(1)) < 0 || r.Num().Cmp(big.NewInt(most)) > 0 {
		d.problem(at+"/"+key, "MCP server %s: %s is %s; want an integer from 1 to %d", quote(server), key, display(n), most)
		return 0
	}
	return int(r.Num().Int64())
}

// resolve makes a path absolute against the Location directory.
func (d *decoder) resolve(p string) string {
	p = filepath.FromSlash(p)
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(d.dir, p)
}

// program resolves a program that names a path; a bare name is left for a
// PATH lookup when the process starts.
func (d *decoder) program(p string) string {
	if filepath.IsAbs(p) || strings.ContainsRune(p, '/') || strings.ContainsRune(p, filepath.Separator) {
		return d.resolve(p)
	}
	return p
}

// workDir resolves a working directory that must stay inside the Location
// directory, both as written and, when it exists, after evaluating symlinks.
// "" is the Location directory itself.
func (d *decoder) workDir(path, p string) string {
	if p == "" {
		return d.dir
	}
	abs := d.resolve(p)
	if !within(d.dir, abs) {
		d.problem(path, "directory %s is outside the Location directory %s", quote(p), d.dir)
		return ""
	}
	resolved, err := filepath.EvalSymlinks(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// It may be created before anything runs in it; starting there will
		// fail loudly if it is not.
		return abs
	case err != nil:
		d.problem(path, "directory %s: %v", quote(p), err)
		return ""
	case !within(d.dir, resolved):
		d.problem(path, "directory %s resolves to %s, outside the Location directory %s", quote(p), resolved, d.dir)
		return ""
	}
	if fi, err := os.Stat(resolved); err == nil && !fi.IsDir() {
		d.problem(path, "directory %s is not a directory", quote(p))
		return ""
	}
	return resolved
}

// within reports whether p is root or below it; both are clean and absolute.
func within(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	if err != nil {
		return false
	}
	return rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// compact returns the compact form of a schema-valid JSON value, or nil.
func compact(raw json.RawMessage) json.RawMessage {
	if raw == nil {
		return nil
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return slices.Clone(raw)
	}
	return b.Bytes()
}
