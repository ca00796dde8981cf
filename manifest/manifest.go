package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/toolhost/toolhost/internal/filestore"
	"github.com/toolhost/toolhost/internal/sandbox"
	sandboxcfg "github.com/toolhost/toolhost/sandbox"
)

// Dir is where manifest files live, relative to a Location directory.
const Dir = ".toolhost/tools"

// Defaults for a Tool's zero fields.
const (
	DefaultTimeout        = 2 * time.Minute
	DefaultMaxOutputBytes = 10 << 20
	// KillGrace is how long a cancelled or timed-out command gets between SIGTERM and
	// SIGKILL of its process group.
	KillGrace = 2 * time.Second
)

// Tool is one command tool. Config tools come from the Location config (its
// "tools" entries, already validated there); file tools from Load.
type Tool struct {
	// Name is the tool's authored name.
	Name string
	// Description tells the model what the tool does.
	Description string
	// InputSchema is the JSON Schema of the input; nil means any JSON object.
	InputSchema json.RawMessage
	// OutputSchema, if set, makes stdout JSON that must satisfy it; nil: text.
	OutputSchema json.RawMessage
	// Command is the program and its arguments. Command[0] is an absolute path, or a
	// bare name looked up on Env's PATH at each call.
	Command []string
	// Dir is the absolute working directory, inside the Location (the config and
	// Load always set it; "" would mean the host's working directory).
	Dir string
	// Env is the command's whole environment.
	Env map[string]string
	// Sandbox confines the command (Sandbox.Confine) and caps its resources. Each
	// call's process tree is always contained (Contain is forced on): nothing it
	// starts outlives the call. Name defaults to the tool's.
	Sandbox sandboxcfg.Spec
	// Timeout bounds each call; zero means DefaultTimeout.
	Timeout time.Duration
	// MaxOutputBytes caps the captured stdout; zero means DefaultMaxOutputBytes.
	MaxOutputBytes int64
	// Overrides lets the tool take over its name from another source of the
	// Location (registry.Batch.Overrides); only the config sets it.
	Overrides []string
	// File is the manifest file the tool was loaded from; "" for config tools. It
	// only serves messages.
	File string
}

// Containment reports how each run of the tool's command is held together, and
// whether Landlock confines it, on this machine (see sandbox.Expected).
func (t Tool) Containment() (sandboxcfg.Mode, bool) {
	spec := sandbox.SpecOf(t.Sandbox)
	spec.Contain = true
	m, confined := sandbox.Expected(spec)
	return sandboxcfg.Mode(m), confined
}

// Load reads the manifests in <locationDir>/.toolhost/tools/*.json, in name order:
// one tool per file, with the fields of the config's "tools" entries (name,
// description, input_schema, output_schema, command, dir, env, timeout,
// max_output_bytes). locationDir must be absolute and canonical.
//
// Each file is validated on its own: a bad one (unreadable, not JSON, an unknown or
// mistyped field, a missing name, description or command, a directory outside the
// Location, a name already used by an earlier file) is reported in the returned
// errors, one per file naming it and every problem, and skipped; the others load. A
// missing directory is no tools and no error. Relative paths (Command[0] with a
// slash, Dir) are resolved against locationDir. Schemas are not compiled here: the
// registry compiles them at registration.
func Load(locationDir string) ([]Tool, []error) {
	if !filepath.IsAbs(locationDir) {
		return nil, []error{fmt.Errorf("manifest: location dir %q is not absolute", locationDir)}
	}
	locationDir = filepath.Clean(locationDir)
	files, err := filepath.Glob(filepath.Join(locationDir, filepath.FromSlash(Dir), "*.json"))
	if err != nil {
		return nil, []error{fmt.Errorf("manifest: %w", err)}
	}
	slices.Sort(files)
	var tools []Tool
	var errs []error
	seen := map[string]string{}
	for _, file := range files {
		t, err := loadFile(locationDir, file)
		if err == nil {
			if prev, dup := seen[t.Name]; dup {
				err = &FileError{File: file, Problems: []string{fmt.Sprintf("name: %q is already used by %s", t.Name, prev)}}
			}
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		seen[t.Name] = file
		tools = append(tools, t)
	}
	return tools, errs
}

// FileError reports an invalid manifest file; it was skipped.
type FileError struct {
	File     string
	Problems []string
	Err      error // a read failure, if that was the problem
}

func (e *FileError) Error() string {
	msg := "manifest: " + e.File
	if fe := (*filestore.FileError)(nil); errors.As(e.Err, &fe) {
		return "manifest: " + fe.Error() // it names the file
	}
	if e.Err != nil {
		return msg + ": " + e.Err.Error()
	}
	return msg + ": " + strings.Join(e.Problems, "; ")
}

func (e *FileError) Unwrap() error { return e.Err }

// rawTool mirrors a manifest file. Pointers tell absent from empty.
type rawTool struct {
	Name           *string           `json:"name"`
	Description    *string           `json:"description"`
	InputSchema    json.RawMessage   `json:"input_schema"`
	OutputSchema   json.RawMessage   `json:"output_schema"`
	Command        []string          `json:"command"`
	Dir            *string           `json:"dir"`
	Env            map[string]string `json:"env"`
	Timeout        *string           `json:"timeout"`
	MaxOutputBytes *json.Number      `json:"max_output_bytes"`
}

var (
	// nameGrammar is compiled on first use: its counted repetition makes compiling
	// it cost enough to show in every toolhost command's start.
	nameGrammar = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,63}$`) })
	envGrammar  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

const maxManifestBytes = 1 << 20

func loadFile(locationDir, file string) (Tool, error) {
	data, err := readLimited(file, maxManifestBytes)
	if err != nil {
		return Tool{}, &FileError{File: file, Err: err}
	}
	var problems []string
	problem := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	var raw rawTool
	dec := json.NewDecoder(bytes.NewReader(bytes.TrimPrefix(data, []byte("\ufeff"))))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return Tool{}, &FileError{File: file, Problems: []string{decodeProblem(err)}}
	}
	if dec.More() {
		return Tool{}, &FileError{File: file, Problems: []string{"unexpected content after the JSON object"}}
	}

	t := Tool{File: file, Env: raw.Env}
	switch {
	case raw.Name == nil:
		problem(`name: missing`)
	case !nameGrammar().MatchString(*raw.Name):
		problem("name: invalid name %q: want a letter followed by at most 63 letters, digits, '_' or '-'", *raw.Name)
	default:
		t.Name = *raw.Name
	}
	if raw.Description == nil || *raw.Description == "" {
		problem("description: missing or empty")
	} else {
		t.Description = *raw.Description
	}
	for _, s := range []struct {
		field string
		raw   json.RawMessage
		dst   *json.RawMessage
	}{{"input_schema", raw.InputSchema, &t.InputSchema}, {"output_schema", raw.OutputSchema, &t.OutputSchema}} {
		if s.raw == nil || bytes.Equal(s.raw, []byte("null")) {
			continue
		}
		var b bytes.Buffer
		if trimmed := bytes.TrimSpace(s.raw); len(trimmed) == 0 || trimmed[0] != '{' || json.Compact(&b, trimmed) != nil {
			problem("%s: must be a JSON object", s.field)
			continue
		}
		*s.dst = b.Bytes()
	}
	switch {
	case len(raw.Command) == 0:
		problem("command: missing or empty: want the program and its arguments")
	case slices.Contains(raw.Command, ""):
		problem("command: must not contain empty strings")
	default:
		t.Command = slices.Clone(raw.Command)
		if strings.Contains(t.Command[0], "/") && !filepath.IsAbs(t.Command[0]) {
			t.Command[0] = filepath.Join(locationDir, filepath.FromSlash(t.Command[0]))
		}
	}
	t.Dir = locationDir
	if raw.Dir != nil {
		dir, err := workDir(locationDir, *raw.Dir)
		if err != nil {
			problem("dir: %v", err)
		}
		t.Dir = dir
	}
	for k := range raw.Env {
		if !envGrammar.MatchString(k) {
			problem("env: invalid environment variable name %q", k)
		}
	}
	if raw.Timeout != nil {
		d, err := time.ParseDuration(*raw.Timeout)
		switch {
		case err != nil:
			problem("timeout: invalid duration %q: want a Go duration such as \"10s\"", *raw.Timeout)
		case d <= 0:
			problem("timeout: invalid duration %q: must be positive", *raw.Timeout)
		}
		t.Timeout = d
	}
	if raw.MaxOutputBytes != nil {
		n, err := raw.MaxOutputBytes.Int64()
		if err != nil || n < 1 {
			problem("max_output_bytes: got %s, want a positive integer", raw.MaxOutputBytes.String())
		}
		t.MaxOutputBytes = n
	}
	if len(problems) > 0 {
		return Tool{}, &FileError{File: file, Problems: problems}
	}
	return t, nil
}

// readLimited reads a manifest, following a link to a regular file and refusing
// anything else without blocking on it (a named pipe, /dev/zero: a repository
// can link its manifests anywhere), and refusing a file over limit.
func readLimited(file string, limit int64) ([]byte, error) {
	data, err := filestore.Policy{FollowLinks: true, MaxBytes: limit}.ReadFile(file)
	if err == nil && data == nil {
		return nil, fs.ErrNotExist // gone since it was listed
	}
	return data, err
}

func decodeProblem(err error) string {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return fmt.Sprintf("invalid JSON at byte %d: %v", syntax.Offset, err)
	case errors.As(err, &typ):
		return fmt.Sprintf("%s: got a JSON %s, want %s", typ.Field, typ.Value, typ.Type)
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

// workDir resolves a working directory that must stay inside the Location, as
// written and, when it exists, after evaluating symlinks.
func workDir(root, p string) (string, error) {
	abs := filepath.Clean(filepath.FromSlash(p))
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(root, abs)
	}
	if !within(root, abs) {
		return "", fmt.Errorf("directory %q is outside the Location directory %s", p, root)
	}
	resolved, err := filepath.EvalSymlinks(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return abs, nil // may be created before a call; the call fails loudly if not
	case err != nil:
		return "", err
	case !within(root, resolved):
		return "", fmt.Errorf("directory %q resolves to %s, outside the Location directory %s", p, resolved, root)
	}
	if fi, err := os.Stat(resolved); err == nil && !fi.IsDir() {
		return "", fmt.Errorf("%q is not a directory", p)
	}
	return resolved, nil
}

func within(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}
