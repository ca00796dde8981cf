package location

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/toolhost/toolhost/internal/filestore"
	"github.com/toolhost/toolhost/registry"
)

// ConfigPath is the config file's path relative to a Location directory.
const ConfigPath = ".toolhost/config.json"

// Config is the decoded and validated config of one Location.
//
// Every path in it is absolute: relative paths in the file are resolved against
// the Location directory. A Config is a plain value; LoadConfig and ParseConfig
// return a fresh one that nothing else references.
type Config struct {
	// WorkspaceID is the optional workspace id; "" when the file sets none.
	WorkspaceID string
	// Plugins are the Go plugins to start for each activation, in file order.
	Plugins []PluginConfig
	// MCPServers are the MCP servers to start for each activation: this file's, in
	// file order, then those of the ImportMCPConfig files (see mcpconfig.go).
	MCPServers []MCPServerConfig
	// ImportMCPConfig lists the other tools' MCP config files (".mcp.json",
	// ".cursor/mcp.json", ".vscode/mcp.json", "mcp_config.json",
	// "claude_desktop_config.json", "opencode.json", ...) LoadConfig reads
	// servers from (see mcpimport.go).
	ImportMCPConfig []string
	// Notes say what LoadConfig left out of the imported files, one line each
	// naming the file and JSON pointer: a disabled entry, a key that does not
	// apply to toolhost. Activation logs them.
	Notes []string
	// Tools are the manifest tools, in file order.
	Tools []ManifestToolConfig
	// Permission is the ordered rule list; the last matching rule wins.
	Permission []PermissionRule
	// ToolOutput bounds what is sent to the model; zero fields mean the
	// defaults, which the registry applies.
	ToolOutput OutputLimits
}

// PluginConfig declares one Go plugin. Exactly one of Path, Source and Module is set.
type PluginConfig struct {
	// Name identifies the plugin; it is unique across plugins and MCP servers.
	Name string
	// Path is the absolute path of the plugin binary, or "".
	Path string
	// Source is the absolute path of a Go package directory the host builds, or "".
	Source string
	// Module is a Go main package path in a published module, fetched through the
	// Go toolchain and built (see module.go), or ""; Version is then its version or
	// version query, resolved once and locked in .toolhost/plugins.lock.json.
	Module, Version string
	// Allow is the entry's "allow": true. ParseConfig has already turned it into a
	// rule allowing every tool of the plugin, first in Config.Permission.
	Allow bool
	// Trusted plugins also receive the Location's FileSystem and Permission
	// services; untrusted ones get only the Tools capability.
	Trusted bool
	// Grants are what the plugin may do during its calls beyond running: "ask"
	// (sdk.Ask) and "sample" (sdk.Sample). Trusted plugins have both.
	Grants []string
	// SHA256 pins the binary at Path (64 lowercase hex digits), checked on every
	// start; "" means no pin. It is never set together with Source.
	SHA256 string
	// Options is the compact JSON object passed to the plugin's activation, or nil.
	Options json.RawMessage
	// Env is the plugin's complete environment (the host's is not inherited), or nil.
	Env map[string]string
	// StartTimeout bounds the start and handshake; zero means the default.
	StartTimeout time.Duration
	// StopGrace is how long a stopping plugin may take before it is killed;
	// zero means the default.
	StopGrace time.Duration
	// CallTimeout bounds each call of the plugin's tools; zero means the default
	// (10 minutes).
	CallTimeout time.Duration
	// MaxHeldBytes bounds what the plugin's messages make the host hold at once
	// (plugins.Config.MaxHeldBytes); zero means the default.
	MaxHeldBytes int64
	// Sharing holds the plugin's overrides and limits.
	Sharing
	// Sandbox is the source's "sandbox" block, or nil; RequireSandbox refuses to
	// start it unconfined (see SandboxConfig).
	Sandbox        *SandboxConfig
	RequireSandbox bool
}

// Sharing is how a source shares the Location's tool names: the names it may take
// over from another source, and what it may hold.
type Sharing struct {
	// Overrides are the tool names this source may take over although another
	// source of the Location holds them; an allowed override wins whatever the
	// order of registration (see registry.Registry.Register).
	Overrides []string
	// MaxTools and MaxSchemaBytes limit what the source holds at once; zero means
	// the defaults (256 tools, 4 MiB of definitions).
	MaxTools       int
	MaxSchemaBytes int64
}

// MCPServerConfig declares one MCP server: a stdio server (Command) or a remote
// one (URL); exactly one of them is set.
type MCPServerConfig struct {
	// Name identifies the server; it is unique across plugins and MCP servers.
	Name string
	// Remote holds URL, Transport and Headers, and where the entry comes from.
	Remote
	// Command is the program: an absolute path when the file gave a path
	// (relative ones are resolved against the Location directory), or a bare
	// name looked up on PATH when the server starts.
	Command string
	// Args are the program's arguments, or nil.
	Args []string
	// Env is the server's complete environment, or nil.
	Env map[string]string
	// Dir is the absolute working directory, inside the Location directory;
	// it defaults to the Location directory.
	Dir string
	// Timeout bounds each request to the server; zero means the default.
	Timeout time.Duration
	// StartTimeout bounds launching, initialization and the first tool listing
	// (and how long a call waits for a restarting server); zero means 30s.
	StartTimeout time.Duration
	// Sharing holds the server's overrides (registered names, "<server>_<tool>")
	// and limits.
	Sharing
	// Sandbox is the source's "sandbox" block, or nil; RequireSandbox refuses to
	// start it unconfined (see SandboxConfig).
	Sandbox        *SandboxConfig
	RequireSandbox bool
	// MaxHeldBytes bounds what the server's messages make the host hold at once
	// (mcp.Config.MaxHeldBytes); zero means the default.
	MaxHeldBytes int64
	// MaxPendingAsks, AskBurst and AsksPerMinute bound the server's elicitation
	// and sampling requests (mcp.Config.Asks: max_pending_asks, from 1 to
	// mcp.MaxPendingAsks; ask_burst and asks_per_minute, from 1 to MaxAskRate);
	// zero means the default.
	MaxPendingAsks int
	AskBurst       int
	AsksPerMinute  int
}

// MaxAskRate is the most an MCP server's ask_burst and asks_per_minute may be.
const MaxAskRate = 1_000_000

// ManifestToolConfig declares one manifest tool: a command run per call that
// reads the input on stdin and writes the output on stdout.
type ManifestToolConfig struct {
	// Name is the tool's authored name; it is unique within Tools.
	Name string
	// Description is the model-facing description.
	Description string
	// InputSchema is the compact JSON Schema object of the input, or nil. It is
	// not compiled here; the registry compiles it at registration.
	InputSchema json.RawMessage
	// OutputSchema is the compact JSON Schema object of the output, or nil.
	OutputSchema json.RawMessage
	// Command is the program and its arguments; Command[0] is resolved like
	// MCPServerConfig.Command.
	Command []string
	// Dir is the absolute working directory, inside the Location directory;
	// it defaults to the Location directory.
	Dir string
	// Env is the command's complete environment, or nil.
	Env map[string]string
	// Timeout bounds each call; zero means the default.
	Timeout time.Duration
	// MaxOutputBytes caps the captured stdout; zero means the default.
	MaxOutputBytes int64
	// Overrides lets this tool take over its name from another source of the
	// Location; it can hold only its own name.
	Overrides []string
	// Sandbox is the source's "sandbox" block, or nil; RequireSandbox refuses to
	// start it unconfined (see SandboxConfig).
	Sandbox        *SandboxConfig
	RequireSandbox bool
}

// Effect is the outcome a permission rule assigns.
type Effect string

// The effects a PermissionRule can have.
const (
	EffectAllow Effect = "allow"
	EffectDeny  Effect = "deny"
	EffectAsk   Effect = "ask"
)

// PermissionRule is one {action, resource, effect} rule. Action and Resource
// are non-empty patterns (permission.Match; the rules are described in
// docs/design.md, "The Location config and its reload").
type PermissionRule struct {
	Action   string
	Resource string
	Effect   Effect
	// Source, if set, is a pattern of the tool sources the rule applies to
	// ("builtin", "plugin:NAME", "mcp:NAME", "manifest:NAME"); "" applies to all.
	Source string
}

// OutputLimits bounds the tool output sent to the model. A zero field means the
// default; a set field is at least registry.MinMaxLines lines and
// registry.MinMaxBytes bytes (a preview needs room for its marker).
type OutputLimits struct {
	MaxLines int
	MaxBytes int
	// QuotaBytes is the Location's managed-storage quota; zero means 1 GiB.
	QuotaBytes int64
}

// limits is the registry's form of o.
func (o OutputLimits) limits() registry.Limits {
	return registry.Limits{MaxLines: o.MaxLines, MaxBytes: o.MaxBytes, MaxRetainedBytes: o.QuotaBytes}
}

// Canonicalize returns the canonical form of a Location directory: absolute,
// with every symlink evaluated. It fails unless dir is an existing directory.
func Canonicalize(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("location: %w", err)
	}
	resolved, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("location: %w", err)
	}
	fi, err := os.Stat(resolved)
	if err != nil {
		return "", fmt.Errorf("location: %w", err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("location: %s is not a directory", resolved)
	}
	return resolved, nil
}

// workspaceFile is what the files of a workspace toolhost reads (the config, the
// lock file, the MCP configs it imports) may be: a regular file of at most 16
// MiB, or a link to one. A repository that links one of them to /dev/zero or to a
// named pipe gets an error, not a host that reads forever.
var workspaceFile = filestore.Policy{FollowLinks: true}

// LoadConfig reads and validates <dir>/.toolhost/config.json. Dir must be
// absolute and canonical (see Canonicalize); the caller canonicalizes.
//
// A missing file is an empty config: LoadConfig returns a zero Config and nil.
// An invalid document returns a *ConfigError listing every problem; other
// failures (an unreadable file, one that is not a regular file or a link to one,
// one over 16 MiB) return an error naming the file. Resolved paths
// in the result are absolute. LoadConfig is safe for concurrent use.
func LoadConfig(dir string) (*Config, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("location: config dir %q is not absolute", dir)
	}
	file := filepath.Join(dir, filepath.FromSlash(ConfigPath))
	data, err := workspaceFile.ReadFile(file)
	if errors.Is(err, filestore.ErrRefused) {
		return nil, fmt.Errorf("location: config: %w", err)
	}
	if err != nil {
		return nil, fmt.Errorf("location: read config: %w", err)
	}
	if data == nil {
		return &Config{}, nil
	}
	cfg, err := ParseConfig(dir, file, data)
	if err != nil {
		return nil, err
	}
	if err := importMCPConfigs(dir, cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// ParseConfig validates data against the config schema and decodes it as the
// config of the Location at dir, which must be absolute and canonical. File
// names the document in errors; "" means <dir>/.toolhost/config.json.
//
// An invalid document returns a *ConfigError listing every problem found: a
// JSON syntax error alone; otherwise every schema violation; and, for a
// document the schema accepts, every semantic problem (a duplicate name, a
// duration that does not parse or is not positive, a working directory outside
// the Location). ParseConfig does not retain or modify data; it reads the file
// system only to evaluate the symlinks of existing working directories. It is
// safe for concurrent use.
func ParseConfig(dir, file string, data []byte) (*Config, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("location: config dir %q is not absolute", dir)
	}
	dir = filepath.Clean(dir)
	if file == "" {
		file = filepath.Join(dir, filepath.FromSlash(ConfigPath))
	}
	// Editors on some systems write a byte order mark; it carries no meaning.
	data = bytes.TrimPrefix(data, []byte("\ufeff"))

	doc, problem := parseJSON(data)
	if problem != nil {
		return nil, newConfigError(file, []ConfigProblem{*problem})
	}
	if err := compiledSchema().Validate(doc); err != nil {
		var verr *jsonschema.ValidationError
		if !errors.As(err, &verr) {
			return nil, newConfigError(file, []ConfigProblem{{Message: err.Error()}})
		}
		return nil, newConfigError(file, schemaProblems(verr))
	}

	var raw rawConfig
	if err := json.Unmarshal(data, &raw); err != nil {
		// The schema admits only documents that decode; reaching this is a
		// mismatch between the schema and rawConfig.
		return nil, newConfigError(file, []ConfigProblem{{Message: fmt.Sprintf("cannot decode: %v", err)}})
	}
	d := decoder{dir: dir, file: file}
	cfg := d.config(&raw)
	if len(d.problems) > 0 {
		return nil, newConfigError(file, d.problems)
	}
	return cfg, nil
}
