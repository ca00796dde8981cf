package location

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/toolhost/toolhost/internal/filestore"
	"github.com/toolhost/toolhost/mcp"
)

// Reading the MCP config files other tools keep in a workspace, each as its tool
// writes it (see importFormats). Imported servers join the Location's list; a
// name (normalized: characters outside [A-Za-z0-9_-] become "_") used twice
// anywhere makes the later entry fail, naming both places. An imported stdio
// server's environment is its env (and env file) plus PATH and HOME from the host
// when it does not set them (those tools' servers inherit the whole environment;
// toolhost passes only these).
//
// A file degrades per entry: an entry with a key toolhost does not know, or a
// value it cannot use, is kept with its Problem and reported as a Failed source
// while the other entries serve. Only a file that is not JSON, or whose servers
// are not an object, is a *ConfigError refusing the Location.

// importFormat is one tool's MCP config file.
type importFormat struct {
	tool   string    // who writes the file, for messages
	key    string    // the top-level object of servers by name
	syntax varSyntax // how its values reference variables
	// keys are the entry keys toolhost reads (opencode's are its own).
	keys []string
	// ownsTop: the file is the tool's whole config, so its other top-level keys
	// are the tool's business and ignored without a note.
	ownsTop bool
}

// importFormats maps the paths import_mcp_config accepts to their formats.
var importFormats = map[string]importFormat{
	".mcp.json":                  {tool: "Claude Code", key: "mcpServers", syntax: syntaxClaude, keys: []string{"type", "command", "args", "env", "url", "headers", "headersHelper"}},
	".cursor/mcp.json":           {tool: "Cursor", key: "mcpServers", syntax: syntaxCursor, keys: []string{"type", "command", "args", "env", "envFile", "url", "headers"}},
	".vscode/mcp.json":           {tool: "VS Code", key: "servers", syntax: syntaxVSCode, keys: []string{"type", "command", "args", "env", "envFile", "cwd", "url", "headers", "dev"}},
	".windsurf/mcp_config.json":  windsurf,
	"mcp_config.json":            windsurf,
	"claude_desktop_config.json": {tool: "Claude Desktop", key: "mcpServers", syntax: syntaxNone, keys: []string{"command", "args", "env"}, ownsTop: true},
	"opencode.json":              opencode,
	".opencode/opencode.json":    opencode,
}

var (
	windsurf = importFormat{tool: "Windsurf", key: "mcpServers", syntax: syntaxWindsurf, keys: []string{"command", "args", "env", "serverUrl", "url", "headers", "disabled", "disabledTools"}}
	opencode = importFormat{tool: "opencode", key: "mcp", syntax: syntaxOpencode, ownsTop: true}
)

// importMCPConfigs adds the servers of cfg.ImportMCPConfig's files. A missing
// file is skipped; a file that cannot be read as JSON, or has no object of
// servers, is a *ConfigError naming it.
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
		data, err := workspaceFile.ReadFile(file)
		if errors.Is(err, filestore.ErrRefused) {
			errs = append(errs, fmt.Errorf("location: %w", err))
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("location: read %s: %w", file, err))
			continue
		}
		if data == nil {
			continue
		}
		servers, notes, problems := parseImported(dir, file, importFormats[rel], data, seen)
		if len(problems) > 0 {
			errs = append(errs, newConfigError(file, problems))
			continue
		}
		cfg.MCPServers = append(cfg.MCPServers, servers...)
		cfg.Notes = append(cfg.Notes, notes...)
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}

// parseImported reads the servers of one imported file. Problems refusing the
// whole file come back as problems; an entry's own are its Problem.
func parseImported(dir, file string, f importFormat, data []byte, seen map[string]string) (servers []MCPServerConfig, notes []string, problems []ConfigProblem) {
	doc, problem := parseJSON(data)
	if problem != nil {
		return nil, nil, []ConfigProblem{*problem}
	}
	top, ok := doc.(map[string]any)
	if !ok {
		return nil, nil, []ConfigProblem{{Message: "got " + display(doc) + ", want a JSON object"}}
	}
	if !f.ownsTop {
		for _, k := range slices.Sorted(maps.Keys(top)) {
			if k != f.key && !(f.syntax == syntaxVSCode && k == "inputs") {
				notes = append(notes, fmt.Sprintf("%s at /%s: ignored: toolhost reads only %s of this %s file", file, pointerToken(k), quote(f.key), f.tool))
			}
		}
	}
	raw, present := top[f.key]
	if !present && f.ownsTop {
		return nil, notes, nil // the tool's config without MCP servers
	}
	entries, ok := raw.(map[string]any)
	if !ok {
		if raw == nil {
			return nil, notes, []ConfigProblem{{Message: fmt.Sprintf("no %s object of servers by name", quote(f.key))}}
		}
		return nil, notes, []ConfigProblem{{Path: "/" + pointerToken(f.key), Message: fmt.Sprintf("got %s, want an object of servers by name", display(raw))}}
	}
	for _, name := range slices.Sorted(maps.Keys(entries)) {
		at := "/" + pointerToken(f.key) + "/" + pointerToken(name)
		d := &decoder{dir: dir, file: file}
		var m MCPServerConfig
		var skip string
		if f.syntax == syntaxOpencode {
			m, skip = d.opencodeEntry(at, name, entries[name])
		} else {
			m, skip = d.importedEntry(at, name, entries[name], f)
		}
		if skip != "" {
			notes = append(notes, fmt.Sprintf("%s at %s: %s", file, at, skip))
			continue
		}
		notes = append(notes, d.notes...)
		if prev, dup := seen[m.Name]; dup {
			d.problem(at, "duplicate server name %s: already defined in %s", quote(m.Name), prev)
		} else {
			seen[m.Name] = m.Origin
		}
		if len(d.problems) > 0 {
			m.Problem = newConfigError(file, d.problems)
		}
		servers = append(servers, m)
	}
	return servers, notes, nil
}

// newImported starts the MCPServerConfig of the entry at at.
func (d *decoder) newImported(at, name string, syntax varSyntax) MCPServerConfig {
	m := MCPServerConfig{Name: badChars.ReplaceAllString(name, "_"), Dir: d.dir}
	m.Origin, m.syntax, m.wsDir = d.file+" at "+at, syntax, d.dir
	if !nameRE().MatchString(m.Name) {
		d.problem(at, "server name %s cannot name tools: it must start with a letter and have at most 64 characters", quote(name))
	}
	return m
}

// entryReader reads the values of one entry object, each checked for its type
// and its variable references.
type entryReader struct {
	d      *decoder
	at     string
	e      map[string]any
	syntax varSyntax
}

func (r entryReader) str(k string) string {
	s, ok := r.e[k].(string)
	if r.e[k] != nil && (!ok || s == "") {
		r.d.problem(r.at+"/"+k, "got %s, want a non-empty string", display(r.e[k]))
	}
	if ok {
		r.d.refs(r.at+"/"+k, s, r.syntax)
	}
	return s
}

func (r entryReader) strMap(k string, keyRE *regexp.Regexp) map[string]string {
	if r.e[k] == nil {
		return nil
	}
	obj, ok := r.e[k].(map[string]any)
	if !ok {
		r.d.problem(r.at+"/"+k, "got %s, want an object of strings", display(r.e[k]))
		return nil
	}
	out := map[string]string{}
	for _, n := range slices.Sorted(maps.Keys(obj)) {
		p := r.at + "/" + k + "/" + pointerToken(n)
		s, ok := obj[n].(string)
		switch {
		case !keyRE.MatchString(n):
			r.d.problem(p, "invalid name %s", quote(n))
		case !ok:
			r.d.problem(p, "got %s, want a string", display(obj[n]))
		default:
			r.d.refs(p, s, r.syntax)
			out[n] = s
		}
	}
	return out
}

func (r entryReader) strList(k string) []string {
	if r.e[k] == nil {
		return nil
	}
	list, ok := r.e[k].([]any)
	if !ok {
		r.d.problem(r.at+"/"+k, "got %s, want an array of strings", display(r.e[k]))
		return nil
	}
	out := []string{}
	for i, a := range list {
		s, ok := a.(string)
		if !ok {
			r.d.problem(fmt.Sprintf("%s/%s/%d", r.at, k, i), "got %s, want a string", display(a))
			continue
		}
		r.d.refs(fmt.Sprintf("%s/%s/%d", r.at, k, i), s, r.syntax)
		out = append(out, s)
	}
	return out
}

func (r entryReader) boolean(k string) bool {
	b, ok := r.e[k].(bool)
	if r.e[k] != nil && !ok {
		r.d.problem(r.at+"/"+k, "got %s, want true or false", display(r.e[k]))
	}
	return b
}

// unknown reports the keys of the entry outside known.
func (r entryReader) unknown(tool string, known []string) {
	for _, k := range slices.Sorted(maps.Keys(r.e)) {
		if !slices.Contains(known, k) {
			r.d.problem(r.at+"/"+pointerToken(k), "%s is a key toolhost does not read in %s's file; it reads %s", quote(k), tool, strings.Join(known, ", "))
		}
	}
}

// importedEntry decodes one entry of an mcpServers or servers object. A
// non-empty skip says why the entry is left out (it is disabled).
func (d *decoder) importedEntry(at, name string, v any, f importFormat) (m MCPServerConfig, skip string) {
	m = d.newImported(at, name, f.syntax)
	e, ok := v.(map[string]any)
	if !ok {
		d.problem(at, "got %s, want an object", display(v))
		return m, ""
	}
	r := entryReader{d: d, at: at, e: e, syntax: f.syntax}
	r.unknown(f.tool, f.keys)
	if r.boolean("disabled") {
		return m, "left out: it is disabled"
	}
	typ := r.str("type")
	m.Command, m.URL = r.str("command"), r.str("url")
	if u := r.str("serverUrl"); u != "" {
		if m.URL != "" {
			d.problem(at+"/serverUrl", "give serverUrl or url, not both")
		}
		m.URL, m.serverURL = u, true
	}
	m.Env, m.Headers = r.strMap("env", varName), r.strMap("headers", headerName)
	m.Args = r.strList("args")
	m.envFile = r.str("envFile")
	m.headersHelper = r.str("headersHelper")
	if e["dev"] != nil {
		d.notes = append(d.notes, fmt.Sprintf("%s at %s/dev: ignored: VS Code's development mode (watching files, debugging) does not apply to toolhost; restart the server with toolhost restart", d.file, at))
	}
	if tools := r.strList("disabledTools"); len(tools) > 0 {
		d.problem(at+"/disabledTools", "toolhost does not hide single tools of a server; deny them with permission rules in %s instead", ConfigPath)
	}
	if cwd := r.str("cwd"); cwd != "" {
		if c, err := expand(cwd, f.syntax, d.dir, nil); err == nil && !strings.Contains(c, "${") {
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
	d.transport(at, &m, typ, e)
	return m, ""
}

// transport checks the entry's fields against its type ("stdio", "http",
// "streamable-http" or "sse") and sets what the type implies.
func (d *decoder) transport(at string, m *MCPServerConfig, typ string, e map[string]any) {
	switch typ {
	case "stdio":
		if m.Command == "" {
			d.problem(at, "a stdio server needs a command")
		}
		for _, k := range []string{"url", "serverUrl", "headers", "headersHelper"} {
			if e[k] != nil {
				d.problem(at+"/"+k, "applies only to a remote server (type http or sse)")
			}
		}
		m.InheritEnv = []string{"PATH", "HOME"}
	case "http", "streamable-http", "sse":
		if m.URL == "" {
			d.problem(at, "a remote server (type %s) needs a url", typ)
		} else if !strings.Contains(m.URL, "${") {
			if err := mcp.ValidateURL(m.URL); err != nil {
				d.problem(at+m.urlKey(), "%v", err)
			}
		}
		for _, k := range []string{"command", "args", "env", "envFile", "cwd"} {
			if e[k] != nil {
				d.problem(at+"/"+k, "applies only to a stdio server")
			}
		}
		switch typ {
		case "sse":
			m.Transport = mcp.TransportSSE
		case "streamable-http":
			m.Transport = mcp.TransportStreamable
		}
	case "":
	default:
		d.problem(at+"/type", "got %s, want \"stdio\", \"http\", \"streamable-http\" or \"sse\"", quote(typ))
	}
}

// opencodeEntry decodes one entry of opencode.json's mcp object:
// {"type": "local", "command": [PROGRAM, ARGS...], "environment", "enabled", "timeout"}
// or {"type": "remote", "url", "headers", "enabled", "timeout", "oauth"}.
func (d *decoder) opencodeEntry(at, name string, v any) (m MCPServerConfig, skip string) {
	m = d.newImported(at, name, syntaxOpencode)
	e, ok := v.(map[string]any)
	if !ok {
		d.problem(at, "got %s, want an object", display(v))
		return m, ""
	}
	r := entryReader{d: d, at: at, e: e, syntax: syntaxOpencode}
	if enabled, set := e["enabled"].(bool); set && !enabled {
		return m, "left out: it is not enabled"
	}
	r.boolean("enabled")
	if e["timeout"] != nil {
		ms, err := jsonInt(e["timeout"])
		if err != nil || ms <= 0 {
			d.problem(at+"/timeout", "got %s, want a positive number of milliseconds", display(e["timeout"]))
		}
		m.StartTimeout = time.Duration(ms) * time.Millisecond
	}
	switch typ := r.str("type"); typ {
	case "local":
		r.unknown("opencode", []string{"type", "command", "environment", "enabled", "timeout"})
		command := r.strList("command")
		if len(command) == 0 {
			d.problem(at+"/command", "a local server needs a command: an array of the program and its arguments")
		} else {
			m.Command, m.Args = command[0], command[1:]
		}
		m.Env = r.strMap("environment", varName)
		m.InheritEnv = []string{"PATH", "HOME"}
	case "remote":
		r.unknown("opencode", []string{"type", "url", "headers", "enabled", "timeout", "oauth"})
		m.URL = r.str("url")
		m.Headers = r.strMap("headers", headerName)
		if m.URL == "" {
			d.problem(at, "a remote server needs a url")
		} else if !strings.Contains(m.URL, "{") {
			if err := mcp.ValidateURL(m.URL); err != nil {
				d.problem(at+"/url", "%v", err)
			}
		}
		if o, ok := e["oauth"].(bool); e["oauth"] != nil && (!ok || o) {
			d.problem(at+"/oauth", "toolhost does not take OAuth client settings from opencode's file; sign in with toolhost mcp-login %s", m.Name)
		}
	case "":
		d.problem(at, `missing "type": "local" (a command) or "remote" (a url)`)
	default:
		d.problem(at+"/type", "got %s, want \"local\" or \"remote\"", quote(typ))
	}
	return m, ""
}

// jsonInt converts a decoded JSON number to an integer.
func jsonInt(v any) (int64, error) {
	n, ok := v.(interface{ Int64() (int64, error) })
	if !ok {
		return 0, fmt.Errorf("not a number")
	}
	return n.Int64()
}
