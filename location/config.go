package location

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

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
	// ".cursor/mcp.json", ".vscode/mcp.json") LoadConfig reads servers from.
	ImportMCPConfig []string
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
}

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
// are non-empty patterns (see DESIGN.md, "Permission").
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

// ConfigError reports every problem found in one config file. LoadConfig and
// ParseConfig return it (find it with errors.As) for any invalid document.
type ConfigError struct {
	// File names the config file.
	File string
	// Problems is never empty and is sorted by path.
	Problems []ConfigProblem
}

// ConfigProblem is one problem at one place in a config document.
type ConfigProblem struct {
	// Path is the JSON pointer of the offending value, such as
	// "/plugins/0/sha256"; "" is the whole document.
	Path string
	// Message says what is wrong, lowercase.
	Message string
}

// Error lists the file and one indented "path: message" line per problem.
func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString("location: invalid config ")
	b.WriteString(e.File)
	if len(e.Problems) > 0 {
		b.WriteByte(':')
	}
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		if p.Path != "" {
			b.WriteString(p.Path)
			b.WriteString(": ")
		}
		b.WriteString(p.Message)
	}
	return b.String()
}

//go:embed config.schema.json
var configSchema []byte

// configSchemaURL is the schema's $id; the compiler knows it only as an
// embedded resource and never fetches it.
const configSchemaURL = "https://github.com/toolhost/toolhost/location/config.schema.json"

// ConfigSchema returns the published JSON Schema (draft 2020-12) of the config
// document. The result is a fresh copy the caller may modify.
func ConfigSchema() []byte {
	return bytes.Clone(configSchema)
}

// compiledSchema compiles the embedded schema once. A failure is a defect of
// the build, never of the input, so it panics.
var compiledSchema = sync.OnceValue(func() *jsonschema.Schema {
	sch, err := compileSchema(configSchemaURL, configSchema)
	if err != nil {
		panic(fmt.Sprintf("location: embedded config schema: %v", err))
	}
	return sch
})

// compileSchema compiles a self-contained draft 2020-12 schema. The compiler
// has no loader for any URL scheme, so a $ref outside the document fails
// instead of reaching the network or the file system.
func compileSchema(url string, data []byte) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(jsonschema.SchemeURLLoader{})
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	return c.Compile(url)
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

// LoadConfig reads and validates <dir>/.toolhost/config.json. Dir must be
// absolute and canonical (see Canonicalize); the caller canonicalizes.
//
// A missing file is an empty config: LoadConfig returns a zero Config and nil.
// An invalid document returns a *ConfigError listing every problem; other
// failures (an unreadable file) return an error naming the file. Resolved paths
// in the result are absolute. LoadConfig is safe for concurrent use.
func LoadConfig(dir string) (*Config, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("location: config dir %q is not absolute", dir)
	}
	file := filepath.Join(dir, filepath.FromSlash(ConfigPath))
	data, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return &Config{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("location: read config: %w", err)
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

// newConfigError sorts and deduplicates problems.
func newConfigError(file string, problems []ConfigProblem) *ConfigError {
	slices.SortStableFunc(problems, func(a, b ConfigProblem) int {
		if c := comparePointers(a.Path, b.Path); c != 0 {
			return c
		}
		return strings.Compare(a.Message, b.Message)
	})
	problems = slices.Compact(problems)
	return &ConfigError{File: file, Problems: problems}
}

// comparePointers orders JSON pointers token by token, numeric tokens by value,
// so /plugins/2 sorts before /plugins/10.
func comparePointers(a, b string) int {
	if a == b {
		return 0
	}
	at, bt := strings.Split(a, "/"), strings.Split(b, "/")
	for i := 0; i < len(at) && i < len(bt); i++ {
		if at[i] == bt[i] {
			continue
		}
		an, aerr := strconv.ParseUint(at[i], 10, 64)
		bn, berr := strconv.ParseUint(bt[i], 10, 64)
		if aerr == nil && berr == nil {
			if an < bn {
				return -1
			}
			return 1
		}
		return strings.Compare(at[i], bt[i])
	}
	return len(at) - len(bt)
}

// parseJSON decodes one JSON value (numbers as json.Number, as the validator
// wants them) and reports a syntax error with its line and column.
func parseJSON(data []byte) (any, *ConfigProblem) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		offset := int64(len(data))
		msg := err.Error()
		var serr *json.SyntaxError
		switch {
		case errors.As(err, &serr):
			offset = serr.Offset - 1 // the offending byte is the last one read
		case errors.Is(err, io.EOF):
			msg = "empty document, want a JSON object"
		case errors.Is(err, io.ErrUnexpectedEOF):
			msg = "unexpected end of input"
		}
		return nil, syntaxProblem(data, offset, msg)
	}
	end := dec.InputOffset()
	rest := bytes.TrimLeft(data[end:], " \t\r\n")
	if len(rest) > 0 {
		return nil, syntaxProblem(data, int64(len(data)-len(rest)), "unexpected content after the top-level value")
	}
	return doc, nil
}

// syntaxProblem locates offset as a 1-based line and column (in characters).
func syntaxProblem(data []byte, offset int64, msg string) *ConfigProblem {
	offset = max(0, min(offset, int64(len(data))))
	before := data[:offset]
	line := 1 + bytes.Count(before, []byte("\n"))
	col := 1 + utf8.RuneCount(before[bytes.LastIndexByte(before, '\n')+1:])
	return &ConfigProblem{Message: fmt.Sprintf("invalid JSON at %d:%d: %s", line, col, msg)}
}

// schema error reporting

var printer = message.NewPrinter(language.English)

// schemaProblems flattens a validation error to its leaves, each at its
// instance location.
func schemaProblems(verr *jsonschema.ValidationError) []ConfigProblem {
	var out []ConfigProblem
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		// A oneOf is reported as one problem where it has a message of its
		// own, rather than as the failure of each alternative.
		if _, ok := e.ErrorKind.(*kind.OneOf); ok || len(e.Causes) == 0 {
			out = append(out, leafProblems(e)...)
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(verr)
	return out
}

// leafProblems turns one leaf validation error into problems with readable
// messages. An unknown property becomes a problem at the property's own path.
func leafProblems(e *jsonschema.ValidationError) []ConfigProblem {
	ptr := pointer(e.InstanceLocation)
	def := schemaDef(e.SchemaURL)
	one := func(msg string) []ConfigProblem { return []ConfigProblem{{Path: ptr, Message: msg}} }
	switch k := e.ErrorKind.(type) {
	case *kind.AdditionalProperties:
		var out []ConfigProblem
		for _, name := range k.Properties {
			msg := fmt.Sprintf("unknown property %s", quote(name))
			if def == "env" {
				msg = fmt.Sprintf("invalid environment variable name %s: want letters, digits and '_', not starting with a digit", quote(name))
			}
			out = append(out, ConfigProblem{Path: ptr + "/" + escapeToken(name), Message: msg})
		}
		return out
	case *kind.Required:
		var out []ConfigProblem
		for _, name := range k.Missing {
			out = append(out, ConfigProblem{Path: ptr, Message: fmt.Sprintf("missing required property %s", quote(name))})
		}
		return out
	case *kind.OneOf:
		if def == "plugin" {
			if len(k.Subschemas) > 0 {
				return one(`"path", "source" and "module" are mutually exclusive: set exactly one`)
			}
			return one(`missing "path" (a plugin binary), "source" (a Go package directory) or "module" (a Go package in a published module): set exactly one`)
		}
		if len(e.Causes) > 0 {
			return schemaProblems(&jsonschema.ValidationError{Causes: e.Causes})
		}
	case *kind.DependentRequired:
		return []ConfigProblem{{
			Path:    ptr + "/" + escapeToken(k.Prop),
			Message: fmt.Sprintf("%s requires %s", quote(k.Prop), joinQuoted(k.Missing)),
		}}
	case *kind.Type:
		if ptr == "" {
			return one(fmt.Sprintf("the config must be a JSON object, got %s", k.Got))
		}
		return one(fmt.Sprintf("got %s, want %s", k.Got, strings.Join(k.Want, " or ")))
	case *kind.Pattern:
		switch def {
		case "name":
			return one(fmt.Sprintf("invalid name %s: want a letter followed by at most 63 letters, digits, '_' or '-'", quote(k.Got)))
		case "duration":
			return one(fmt.Sprintf("invalid duration %s: want a positive Go duration such as \"10s\" or \"1m30s\"", quote(k.Got)))
		case "sha256":
			return one(fmt.Sprintf("invalid sha256 %s: want 64 lowercase hex digits", quote(k.Got)))
		case "module_path", "module_version":
			return one(moduleProblem(def, k.Got))
		}
		return one(fmt.Sprintf("%s does not match pattern %s", quote(k.Got), quote(k.Want)))
	case *kind.Enum:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			want[i] = display(w)
		}
		return one(fmt.Sprintf("got %s, want one of %s", display(k.Got), strings.Join(want, ", ")))
	case *kind.MinLength:
		if k.Want == 1 {
			return one("must not be empty")
		}
	case *kind.MinItems:
		if k.Want == 1 {
			return one("must not be empty")
		}
	case *kind.Minimum:
		return one(fmt.Sprintf("got %s, want at least %s", ratString(k.Got), ratString(k.Want)))
	case *kind.Maximum:
		return one(fmt.Sprintf("got %s, want at most %s", ratString(k.Got), ratString(k.Want)))
	}
	return one(e.ErrorKind.LocalizedString(printer))
}

// schemaDef names the $defs entry a schema location points into ("" for
// others), so messages can say what a value is rather than which regexp failed.
func schemaDef(schemaURL string) string {
	_, frag, _ := strings.Cut(schemaURL, "#")
	name, ok := strings.CutPrefix(frag, "/$defs/")
	if !ok {
		return ""
	}
	name, _, _ = strings.Cut(name, "/")
	return name
}

// pointer builds a JSON pointer (RFC 6901) from instance location tokens.
func pointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(escapeToken(t))
	}
	return b.String()
}

func escapeToken(t string) string {
	return strings.ReplaceAll(strings.ReplaceAll(t, "~", "~0"), "/", "~1")
}

// maxQuoted bounds how much of a user's value a message repeats.
const maxQuoted = 80

func quote(s string) string {
	if utf8.RuneCountInString(s) > maxQuoted {
		s = string([]rune(s)[:maxQuoted]) + "…"
	}
	return strconv.Quote(s)
}

func joinQuoted(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = quote(s)
	}
	return strings.Join(q, ", ")
}

// display renders a JSON value from the validator briefly.
func display(v any) string {
	switch v := v.(type) {
	case string:
		return quote(v)
	case json.Number:
		if len(v) > maxQuoted {
			return string(v[:maxQuoted]) + "…"
		}
		return string(v)
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(v)
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprint(v)
}

// ratString prints a number without expanding a huge exponent.
func ratString(r *big.Rat) string {
	if r == nil {
		return "?"
	}
	if r.IsInt() && r.Num().BitLen() <= 64 {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}

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
