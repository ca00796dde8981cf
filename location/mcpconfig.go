package location

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/toolhost/toolhost/internal/filestore"
	"github.com/toolhost/toolhost/mcp"
)

// This file holds what MCP servers need beyond the stdio entries of our own
// config: remote entries (url, transport, headers) and variable references, and
// their expansion when a Location activates. Reading other tools' MCP config
// files is in mcpimport.go.

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
	// Problem is set for an imported entry toolhost cannot run as written (a key
	// it does not know, a value it cannot use): the Location reports the entry as
	// a Failed source with this error, naming the file and the JSON pointer, and
	// serves the rest. nil for a usable entry.
	Problem *ConfigError

	syntax        varSyntax
	wsDir         string // the Location directory, for ${workspaceFolder}
	envFile       string // an env file whose variables the entry's env extends
	headersHelper string // a shell command printing headers as a JSON object
	serverURL     bool   // Windsurf's entry gave its URL as serverUrl
}

// varSyntax is a config format's way of referencing variables.
type varSyntax int

const (
	syntaxOurs     varSyntax = iota // ${VAR}, in headers only
	syntaxNone                      // nothing is expanded (Claude Desktop)
	syntaxClaude                    // ${VAR} and ${VAR:-default}
	syntaxVSCode                    // ${env:VAR}, ${workspaceFolder}, ${userHome}, ${input:ID} (refused)
	syntaxCursor                    // ${env:VAR}, ${workspaceFolder}, ${userHome}
	syntaxWindsurf                  // ${env:VAR} and ${file:PATH}
	syntaxOpencode                  // {env:VAR} and {file:PATH}
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

// expand replaces the references in s. With lookup nil it only checks them;
// otherwise a ${file:PATH} ({file:PATH} for opencode) is replaced by the file's
// contents, trailing white space removed, PATH relative to dir.
func expand(s string, syntax varSyntax, dir string, lookup func(string) (string, bool)) (string, error) {
	open := "${"
	switch syntax {
	case syntaxNone:
		return s, nil
	case syntaxOpencode:
		open = "{"
	}
	var b strings.Builder
	for {
		i := strings.Index(s, open)
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		b.WriteString(s[:i])
		end := strings.IndexByte(s[i:], '}')
		if syntax == syntaxOpencode {
			ref := s[i+1:]
			if !strings.HasPrefix(ref, "env:") && !strings.HasPrefix(ref, "file:") {
				b.WriteString(open) // a brace of the value itself
				s = s[i+1:]
				continue
			}
		}
		if end < 0 {
			return "", fmt.Errorf("unterminated variable reference %s", quote(s[i:]))
		}
		ref := s[i+len(open) : i+end]
		shown := s[i : i+end+1]
		s = s[i+end+1:]
		name, def, hasDef := ref, "", false
		switch syntax {
		case syntaxClaude:
			name, def, hasDef = strings.Cut(ref, ":-")
		case syntaxVSCode, syntaxCursor, syntaxWindsurf, syntaxOpencode:
			supported := "${env:NAME}, ${workspaceFolder} and ${userHome}"
			switch syntax {
			case syntaxWindsurf:
				supported = "${env:NAME} and ${file:PATH}"
			case syntaxOpencode:
				supported = "{env:NAME} and {file:PATH}"
			}
			file, isFile := strings.CutPrefix(ref, "file:")
			switch {
			case strings.HasPrefix(ref, "env:"):
				name = strings.TrimPrefix(ref, "env:")
			case isFile && (syntax == syntaxWindsurf || syntax == syntaxOpencode):
				if file == "" {
					return "", fmt.Errorf("invalid file reference %s: want a path", shown)
				}
				if lookup == nil {
					continue
				}
				v, err := readRef(dir, file, lookup)
				if err != nil {
					return "", err
				}
				b.WriteString(v)
				continue
			case syntax == syntaxVSCode || syntax == syntaxCursor:
				switch ref {
				case "workspaceFolder":
					b.WriteString(dir)
					continue
				case "workspaceFolderBasename":
					b.WriteString(filepath.Base(dir))
					continue
				case "pathSeparator", "/":
					b.WriteString(string(filepath.Separator))
					continue
				case "userHome":
					name = "HOME"
				default:
					if strings.HasPrefix(ref, "input:") {
						return "", fmt.Errorf("%s asks the person for a value, which toolhost cannot do; use ${env:NAME} instead", shown)
					}
					return "", fmt.Errorf("unsupported variable %s (toolhost supports %s)", shown, supported)
				}
			default:
				return "", fmt.Errorf("unsupported variable %s (toolhost supports %s)", shown, supported)
			}
		}
		if !varName.MatchString(name) {
			return "", fmt.Errorf("invalid variable reference %s: want a variable name", shown)
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

// readRef reads the file a ${file:PATH} reference names: PATH is absolute,
// starts with "~/" (the home directory), or is relative to dir.
func readRef(dir, p string, lookup func(string) (string, bool)) (string, error) {
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		home, _ := lookup("HOME")
		if !filepath.IsAbs(home) {
			return "", fmt.Errorf("file %s: HOME is not set", quote(p))
		}
		p = filepath.Join(home, rest)
	} else if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	data, err := readSmall(p, maxRefBytes)
	if err != nil {
		return "", err
	}
	return strings.TrimRight(string(data), " \t\r\n"), nil
}

// maxRefBytes bounds a file read for a reference, an env file or a headers
// helper's output.
const maxRefBytes = 1 << 20

// readSmall reads a regular file of at most limit bytes, or a link to one; it
// refuses anything else (a named pipe, without waiting for a writer) with a
// *filestore.FileError naming it. A missing file is an error.
func readSmall(p string, limit int64) ([]byte, error) {
	data, err := filestore.Policy{FollowLinks: true, MaxBytes: limit}.ReadFile(p)
	if err == nil && data == nil {
		return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
	}
	return data, err
}

// Expand returns m with its variable references replaced from lookup (the host
// environment at activation), its env file read and, for an imported stdio
// server, the inherited variables added. An unset variable is an error naming
// the entry, the field and the variable, never a value. An entry with a Problem
// returns the Problem.
func (m MCPServerConfig) Expand(lookup func(string) (string, bool)) (MCPServerConfig, error) {
	if m.Problem != nil {
		return m, m.Problem
	}
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
		cmdAt, argAt, envAt := "/command", func(i int) string { return fmt.Sprintf("/args/%d", i) }, "/env/"
		if m.syntax == syntaxOpencode {
			cmdAt, argAt, envAt = "/command/0", func(i int) string { return fmt.Sprintf("/command/%d", i+1) }, "/environment/"
		}
		if m.URL != "" {
			out.URL = one(m.urlKey(), m.URL)
		}
		out.Command = one(cmdAt, m.Command)
		if strings.ContainsRune(out.Command, '/') && !filepath.IsAbs(out.Command) {
			out.Command = filepath.Join(m.Dir, out.Command)
		}
		out.Args = nil
		for i, a := range m.Args {
			out.Args = append(out.Args, one(argAt(i), a))
		}
		out.Env = map[string]string{}
		for _, k := range slices.Sorted(maps.Keys(m.Env)) {
			out.Env[k] = one(envAt+pointerToken(k), m.Env[k])
		}
		if m.envFile != "" {
			p := one("/envFile", m.envFile)
			if p != "" && !filepath.IsAbs(p) {
				p = filepath.Join(m.wsDir, p)
			}
			vars, err := readEnvFile(p)
			if err != nil {
				errs = append(errs, fmt.Errorf("/envFile: %w", err))
			}
			for k, v := range vars {
				if _, set := out.Env[k]; !set { // env wins over the file
					out.Env[k] = v
				}
			}
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

// urlKey is the entry's key of its URL: "/serverUrl" for Windsurf's serverUrl.
func (m MCPServerConfig) urlKey() string {
	if m.syntax == syntaxWindsurf && m.serverURL {
		return "/serverUrl"
	}
	return "/url"
}

// readEnvFile reads a dotenv file: NAME=VALUE lines, blank lines and # comments
// skipped, an optional "export " prefix, a value in single quotes taken as is and
// one in double quotes with \n, \" and \\ unescaped.
func readEnvFile(p string) (map[string]string, error) {
	data, err := readSmall(p, maxRefBytes)
	if err != nil {
		return nil, err
	}
	vars := map[string]string{}
	for n, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(strings.TrimSuffix(line, "\r"))
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		k, v, ok := strings.Cut(line, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || !varName.MatchString(k) {
			return nil, fmt.Errorf("%s:%d: want NAME=VALUE", p, n+1)
		}
		switch {
		case len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'':
			v = v[1 : len(v)-1]
		case len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"':
			v = strings.NewReplacer(`\n`, "\n", `\"`, `"`, `\\`, `\`).Replace(v[1 : len(v)-1])
		default:
			if i := strings.Index(v, " #"); i >= 0 {
				v = strings.TrimSpace(v[:i])
			}
		}
		vars[k] = v
	}
	return vars, nil
}

// headersHelperTimeout bounds a headers helper's run.
const headersHelperTimeout = 10 * time.Second

// RunHeadersHelper runs the entry's headers helper (Claude Code's
// "headersHelper"), if it has one, and returns m with the headers it printed
// added over the static ones. The helper is a shell command run in the Location
// directory with env and CLAUDE_CODE_MCP_SERVER_NAME and
// CLAUDE_CODE_MCP_SERVER_URL set; it must print a JSON object of header names
// to string values within 10 seconds. Call it on an expanded entry.
func (m MCPServerConfig) RunHeadersHelper(ctx context.Context, env []string) (MCPServerConfig, error) {
	if m.headersHelper == "" {
		return m, nil
	}
	fail := func(format string, args ...any) (MCPServerConfig, error) {
		return m, fmt.Errorf("location: mcp server %q (%s): /headersHelper: %s", m.Name, m.Origin, fmt.Sprintf(format, args...))
	}
	ctx, cancel := context.WithTimeout(ctx, headersHelperTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", m.headersHelper)
	cmd.Dir = m.wsDir
	cmd.Env = append(slices.Clone(env), "CLAUDE_CODE_MCP_SERVER_NAME="+m.Name, "CLAUDE_CODE_MCP_SERVER_URL="+m.URL)
	cmd.WaitDelay = time.Second
	var stdout, stderr limitedBuffer
	stdout.limit, stderr.limit = maxRefBytes, 4096
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fail("the command did not finish within %s", headersHelperTimeout)
		}
		if tail := strings.TrimSpace(stderr.String()); tail != "" {
			return fail("the command failed (%v): %s", err, tail)
		}
		return fail("the command failed: %v", err)
	}
	if stdout.over {
		return fail("the command printed more than %d bytes", maxRefBytes)
	}
	var printed map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &printed); err != nil || printed == nil {
		return fail("the command must print a JSON object of header names to string values")
	}
	out := m
	out.Headers = maps.Clone(m.Headers)
	if out.Headers == nil {
		out.Headers = map[string]string{}
	}
	for _, k := range slices.Sorted(maps.Keys(printed)) {
		v, ok := printed[k].(string)
		switch {
		case !headerName.MatchString(k):
			return fail("the command printed an invalid header name %s", quote(k))
		case !ok || strings.ContainsAny(v, "\r\n\x00"):
			return fail("the command printed header %s with a value that is not a single-line string", quote(k))
		}
		out.Headers[k] = v
	}
	return out, nil
}

// limitedBuffer keeps the first limit bytes written and notes whether there were more.
type limitedBuffer struct {
	bytes.Buffer
	limit int
	over  bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.limit - b.Len(); len(p) > room {
		b.over = true
		b.Buffer.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return b.Buffer.Write(p)
}

var (
	// nameRE is compiled on first use: its counted repetition makes compiling it
	// cost enough to show in every toolhost command's start.
	nameRE     = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,63}$`) })
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

// askLimits is the mcp package's form of the server's ask limits.
func (mc MCPServerConfig) askLimits() mcp.AskLimits {
	return mcp.AskLimits{MaxPending: mc.MaxPendingAsks, Burst: mc.AskBurst, PerMinute: mc.AsksPerMinute}
}
