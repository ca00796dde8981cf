package location

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/toolhost/toolhost/mcp"
)

// This file holds what MCP servers need beyond the stdio entries of our own
// config: remote entries (url, transport, headers), environment references and
// reading the MCP configs other tools keep in a workspace:
//
//   - ".mcp.json" (Claude Code) and ".cursor/mcp.json" (Cursor):
//     {"mcpServers": {NAME: {"command", "args", "env"} | {"type": "http"|"sse", "url", "headers"}}},
//     with ${VAR} and ${VAR:-default} in command, args, env, url and headers;
//   - ".vscode/mcp.json" (VS Code):
//     {"servers": {NAME: {"type": "stdio"|"http"|"sse", "command", "args", "env", "cwd", "url", "headers"}}, "inputs": [...]},
//     with ${env:VAR}, ${workspaceFolder} and ${userHome}; ${input:ID} needs a
//     prompt toolhost cannot show, so it is a config problem.
//
// Imported servers join the Location's list; a name (normalized: characters
// outside [A-Za-z0-9_-] become "_") used twice anywhere is a problem naming both
// places. An imported stdio server's environment is its "env" plus PATH and HOME
// from the host when it does not set them (those tools' servers inherit the
// whole environment; toolhost passes only these).

// Remote holds the parts of an MCP server entry beyond a stdio command.
type Remote struct {
	// URL is a remote server's MCP endpoint, or "" for a stdio server.
	URL string
	// Transport is "" (streamable HTTP with HTTP+SSE fallback), "streamable-http"
	// or "sse".
	Transport string
	// Headers are sent with every request to a remote server. Their values may
	// reference environment variables, expanded only by Expand at activation.
	Headers map[string]string
	// Origin names where the entry is declared: a file and a JSON pointer.
	Origin string
	// InheritEnv names host variables passed to a stdio server that does not set
	// them (imported entries: PATH and HOME).
	InheritEnv []string

	syntax varSyntax
	wsDir  string // the Location directory, for ${workspaceFolder}
}

// varSyntax is a config format's way of referencing variables.
type varSyntax int

const (
	syntaxOurs   varSyntax = iota // ${VAR}, in headers only
	syntaxClaude                  // ${VAR} and ${VAR:-default}
	syntaxVSCode                  // ${env:VAR}, ${workspaceFolder}, ${userHome}
)

type rawRemote struct {
	URL       string            `json:"url"`
	Transport string            `json:"transport"`
	Headers   map[string]string `json:"headers"`
}

var (
	varName  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	badChars = regexp.MustCompile(`[^A-Za-z0-9_-]`)
)

// remote checks the command/url choice of an entry of our own config.
func (d *decoder) remote(at string, m rawMCPServer) Remote {
	r := Remote{URL: m.URL, Transport: m.Transport, Headers: m.Headers, Origin: d.file + " at " + at}
	switch {
	case m.Command != "" && m.URL != "":
		d.problem(at, "give either command (a stdio server) or url (a remote server), not both")
	case m.Command == "" && m.URL == "":
		d.problem(at, "give command (a stdio server) or url (a remote server)")
	case m.URL != "":
		if err := mcp.ValidateURL(m.URL); err != nil {
			d.problem(at+"/url", "%v", err)
		}
		stdioOnly := map[string]bool{"args": m.Args != nil, "env": m.Env != nil, "dir": m.Dir != "", "sandbox": m.Sandbox != nil, "require_sandbox": m.RequireSandbox}
		for key, set := range stdioOnly {
			if set {
				d.problem(at+"/"+key, "applies only to a stdio server (command), not to a remote one (url)")
			}
		}
	default:
		for key, set := range map[string]bool{"transport": m.Transport != "", "headers": m.Headers != nil} {
			if set {
				d.problem(at+"/"+key, "applies only to a remote server (url)")
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(m.Headers)) {
		d.refs(at+"/headers/"+pointerToken(k), m.Headers[k], syntaxOurs)
	}
	return r
}

// refs reports malformed or unsupported variable references in s.
func (d *decoder) refs(path, s string, syntax varSyntax) {
	if _, err := expand(s, syntax, d.dir, nil); err != nil {
		d.problem(path, "%v", err)
	}
}

// errUnset marks a reference to an unset variable.
type errUnset struct{ name string }

func (e errUnset) Error() string { return fmt.Sprintf("environment variable %s is not set", e.name) }

// expand replaces the references in s. With lookup nil it only checks them.
func expand(s string, syntax varSyntax, dir string, lookup func(string) (string, bool)) (string, error) {
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		b.WriteString(s[:i])
		end := strings.IndexByte(s[i:], '}')
		if end < 0 {
			return "", fmt.Errorf("unterminated variable reference %s", quote(s[i:]))
		}
		ref := s[i+2 : i+end]
		s = s[i+end+1:]
		name, def, hasDef := ref, "", false
		switch syntax {
		case syntaxClaude:
			name, def, hasDef = strings.Cut(ref, ":-")
		case syntaxVSCode:
			switch {
			case ref == "workspaceFolder":
				b.WriteString(dir)
				continue
			case ref == "userHome":
				name = "HOME"
			case strings.HasPrefix(ref, "env:"):
				name = strings.TrimPrefix(ref, "env:")
			case strings.HasPrefix(ref, "input:"):
				return "", fmt.Errorf("${%s} asks the person for a value, which toolhost cannot do; use ${env:NAME} instead", ref)
			default:
				return "", fmt.Errorf("unsupported variable ${%s} (toolhost supports ${env:NAME}, ${workspaceFolder} and ${userHome})", ref)
			}
		}
		if !varName.MatchString(name) {
			return "", fmt.Errorf("invalid variable reference ${%s}: want ${NAME}", ref)
		}
		if lookup == nil {
			continue
		}
		v, ok := lookup(name)
		switch {
		case ok:
			b.WriteString(v)
		case hasDef:
			b.WriteString(def)
		default:
			return "", errUnset{name}
		}
	}
}

// Expand returns m with its variable references replaced from lookup (the host
// environment at activation) and, for an imported stdio server, the inherited
// variables added. An unset variable is an error naming the entry, the field and
// the variable, never a value.
func (m MCPServerConfig) Expand(lookup func(string) (string, bool)) (MCPServerConfig, error) {
	out := m
	var errs []error
	one := func(field, s string) string {
		v, err := expand(s, m.syntax, m.wsDir, lookup)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", field, err))
		}
		return v
	}
	if m.Headers != nil {
		out.Headers = map[string]string{}
		for _, k := range slices.Sorted(maps.Keys(m.Headers)) {
			out.Headers[k] = one("/headers/"+pointerToken(k), m.Headers[k])
		}
	}
	if m.syntax != syntaxOurs {
		out.URL = one("/url", m.URL)
		out.Command = one("/command", m.Command)
		if strings.ContainsRune(out.Command, '/') && !filepath.IsAbs(out.Command) {
			out.Command = filepath.Join(m.Dir, out.Command)
		}
		out.Args = nil
		for i, a := range m.Args {
			out.Args = append(out.Args, one(fmt.Sprintf("/args/%d", i), a))
		}
		out.Env = map[string]string{}
		for _, k := range slices.Sorted(maps.Keys(m.Env)) {
			out.Env[k] = one("/env/"+pointerToken(k), m.Env[k])
		}
	}
	if m.Command != "" && len(m.InheritEnv) > 0 {
		if out.Env == nil {
			out.Env = map[string]string{}
		}
		for _, k := range m.InheritEnv {
			if _, set := out.Env[k]; !set {
				if v, ok := lookup(k); ok {
					out.Env[k] = v
				}
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return m, fmt.Errorf("location: mcp server %q (%s): %w", m.Name, m.Origin, err)
	}
	return out, nil
}

// importMCPConfigs adds the servers of cfg.ImportMCPConfig's files. A missing
// file is skipped; a broken one is a *ConfigError naming it.
func importMCPConfigs(dir string, cfg *Config) error {
	seen := map[string]string{}
	for i, p := range cfg.Plugins {
		seen[p.Name] = fmt.Sprintf("%s at /plugins/%d", filepath.Join(dir, filepath.FromSlash(ConfigPath)), i)
	}
	for _, m := range cfg.MCPServers {
		seen[m.Name] = m.Origin
	}
	var errs []error
	for _, rel := range cfg.ImportMCPConfig {
		file := filepath.Join(dir, filepath.FromSlash(rel))
		data, err := os.ReadFile(file)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("location: read %s: %w", file, err))
			continue
		}
		servers, problems := parseImported(dir, file, rel == ".vscode/mcp.json", data, seen)
		if len(problems) > 0 {
			errs = append(errs, newConfigError(file, problems))
			continue
		}
		cfg.MCPServers = append(cfg.MCPServers, servers...)
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}

// ParseImportedMCPConfig reads the servers of another tool's MCP config file
// (Claude Code's or Cursor's format, or VS Code's when vscode is set) for the
// Location at dir. Problems come back as a *ConfigError naming file.
func ParseImportedMCPConfig(dir, file string, vscode bool, data []byte) ([]MCPServerConfig, error) {
	servers, problems := parseImported(dir, file, vscode, data, map[string]string{})
	if len(problems) > 0 {
		return nil, newConfigError(file, problems)
	}
	return servers, nil
}

func parseImported(dir, file string, vscode bool, data []byte, seen map[string]string) ([]MCPServerConfig, []ConfigProblem) {
	d := &decoder{dir: dir, file: file}
	doc, problem := parseJSON(data)
	if problem != nil {
		return nil, []ConfigProblem{*problem}
	}
	top, ok := doc.(map[string]any)
	if !ok {
		return nil, []ConfigProblem{{Message: "got " + display(doc) + ", want a JSON object"}}
	}
	key, syntax := "mcpServers", syntaxClaude
	if vscode {
		key, syntax = "servers", syntaxVSCode
	}
	for _, k := range slices.Sorted(maps.Keys(top)) {
		if k != key && !(vscode && k == "inputs") {
			d.problem("/"+pointerToken(k), "unknown key; this file's servers are under %s", quote(key))
		}
	}
	entries, ok := top[key].(map[string]any)
	if !ok {
		if top[key] == nil {
			d.problem("", "no %s object", quote(key))
		} else {
			d.problem("/"+key, "got %s, want an object of servers by name", display(top[key]))
		}
		return nil, d.problems
	}
	var out []MCPServerConfig
	for _, name := range slices.Sorted(maps.Keys(entries)) {
		at := "/" + key + "/" + pointerToken(name)
		m, ok := d.imported(at, name, entries[name], syntax)
		if !ok {
			continue
		}
		if prev, dup := seen[m.Name]; dup {
			d.problem(at, "duplicate server name %s: already defined in %s", quote(m.Name), prev)
			continue
		}
		seen[m.Name] = m.Origin
		out = append(out, m)
	}
	return out, d.problems
}

// imported decodes one entry of an imported file.
func (d *decoder) imported(at, name string, v any, syntax varSyntax) (MCPServerConfig, bool) {
	before := len(d.problems)
	m := MCPServerConfig{Name: badChars.ReplaceAllString(name, "_"), Dir: d.dir}
	m.Origin, m.syntax, m.wsDir = d.file+" at "+at, syntax, d.dir
	if !nameRE.MatchString(m.Name) {
		d.problem(at, "server name %s cannot name tools: it must start with a letter and have at most 64 characters", quote(name))
	}
	e, ok := v.(map[string]any)
	if !ok {
		d.problem(at, "got %s, want an object", display(v))
		return m, false
	}
	allowed := []string{"type", "command", "args", "env", "url", "headers"}
	if syntax == syntaxVSCode {
		allowed = append(allowed, "cwd")
	}
	for _, k := range slices.Sorted(maps.Keys(e)) {
		if !slices.Contains(allowed, k) {
			d.problem(at+"/"+pointerToken(k), "unsupported key; toolhost reads %s", strings.Join(allowed, ", "))
		}
	}
	str := func(k string) string {
		s, ok := e[k].(string)
		if e[k] != nil && (!ok || s == "") {
			d.problem(at+"/"+k, "got %s, want a non-empty string", display(e[k]))
		}
		if ok {
			d.refs(at+"/"+k, s, syntax)
		}
		return s
	}
	strMap := func(k string, keyRE *regexp.Regexp) map[string]string {
		if e[k] == nil {
			return nil
		}
		obj, ok := e[k].(map[string]any)
		if !ok {
			d.problem(at+"/"+k, "got %s, want an object of strings", display(e[k]))
			return nil
		}
		out := map[string]string{}
		for _, n := range slices.Sorted(maps.Keys(obj)) {
			path := at + "/" + k + "/" + pointerToken(n)
			s, ok := obj[n].(string)
			switch {
			case !keyRE.MatchString(n):
				d.problem(path, "invalid name %s", quote(n))
			case !ok:
				d.problem(path, "got %s, want a string", display(obj[n]))
			default:
				d.refs(path, s, syntax)
				out[n] = s
			}
		}
		return out
	}
	typ := str("type")
	m.Command, m.URL = str("command"), str("url")
	m.Env, m.Headers = strMap("env", varName), strMap("headers", headerName)
	if e["args"] != nil {
		list, ok := e["args"].([]any)
		if !ok {
			d.problem(at+"/args", "got %s, want an array of strings", display(e["args"]))
		}
		for i, a := range list {
			s, ok := a.(string)
			if !ok {
				d.problem(fmt.Sprintf("%s/args/%d", at, i), "got %s, want a string", display(a))
				continue
			}
			d.refs(fmt.Sprintf("%s/args/%d", at, i), s, syntax)
			m.Args = append(m.Args, s)
		}
	}
	if cwd := str("cwd"); cwd != "" {
		if c, err := expand(cwd, syntax, d.dir, nil); err == nil && !strings.Contains(c, "${") {
			m.Dir = d.workDir(at+"/cwd", strings.ReplaceAll(cwd, "${workspaceFolder}", d.dir))
		} else {
			d.problem(at+"/cwd", "only ${workspaceFolder} may be referenced here")
		}
	}
	if typ == "" {
		switch {
		case m.Command != "" && m.URL == "":
			typ = "stdio"
		case m.URL != "" && m.Command == "":
			typ = "http"
		case m.URL != "":
			d.problem(at, "give either command (a stdio server) or url (a remote server), not both")
		default:
			d.problem(at, "give command (a stdio server) or url (a remote server)")
		}
	}
	switch typ {
	case "stdio":
		if m.Command == "" {
			d.problem(at, "a stdio server needs a command")
		}
		for _, k := range []string{"url", "headers"} {
			if e[k] != nil {
				d.problem(at+"/"+k, "applies only to a remote server (type http or sse)")
			}
		}
		m.InheritEnv = []string{"PATH", "HOME"}
	case "http", "sse":
		if m.URL == "" {
			d.problem(at, "a remote server (type %s) needs a url", typ)
		} else if !strings.Contains(m.URL, "${") {
			if err := mcp.ValidateURL(m.URL); err != nil {
				d.problem(at+"/url", "%v", err)
			}
		}
		for _, k := range []string{"command", "args", "env", "cwd"} {
			if e[k] != nil {
				d.problem(at+"/"+k, "applies only to a stdio server")
			}
		}
		if typ == "sse" {
			m.Transport = mcp.TransportSSE
		}
	case "":
	default:
		d.problem(at+"/type", "got %s, want \"stdio\", \"http\" or \"sse\"", quote(typ))
	}
	return m, len(d.problems) == before
}

var (
	nameRE     = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,63}$`)
	headerName = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
)

// pointerToken escapes a key for a JSON pointer.
func pointerToken(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// envLookup looks names up in a KEY=VALUE list (the last one wins, as in os/exec).
func envLookup(env []string) func(string) (string, bool) {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}
