package telemetry

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// AuditEnv names the environment variable that turns the audit trail on: "on" (or
// "1", "true") writes it to the default directory (see AuditDir), an absolute path
// to that directory; unset, empty or "off" writes none.
const AuditEnv = "TOOLHOST_AUDIT"

// AuditDir resolves where the audit trail goes from getenv: "" when AuditEnv leaves
// it off; else the directory AuditEnv names, or $XDG_STATE_HOME/toolhost/audit
// (XDG_STATE_HOME absolute), else $HOME/.local/state/toolhost/audit. It fails for a
// relative path and when neither variable names a directory.
func AuditDir(getenv func(string) string) (string, error) {
	switch v := getenv(AuditEnv); strings.ToLower(v) {
	case "", "off", "0", "false":
		return "", nil
	case "on", "1", "true":
	default:
		if !filepath.IsAbs(v) {
			return "", fmt.Errorf("telemetry: %s=%q: give an absolute directory, or \"on\" for the default one", AuditEnv, v)
		}
		return v, nil
	}
	if dir := getenv("XDG_STATE_HOME"); filepath.IsAbs(dir) {
		return filepath.Join(dir, "toolhost", "audit"), nil
	}
	if home := getenv("HOME"); filepath.IsAbs(home) {
		return filepath.Join(home, ".local", "state", "toolhost", "audit"), nil
	}
	return "", fmt.Errorf("telemetry: %s is on but there is no state directory: set XDG_STATE_HOME or HOME, or %s to a directory", AuditEnv, AuditEnv)
}

// The lines of the audit trail. Every line has auditHead's members first.
type auditHead struct {
	Time     time.Time `json:"time"`
	Event    string    `json:"event"` // "settlement", "source" or "config"
	Location string    `json:"location"`
}

type auditSettlement struct {
	auditHead
	Session      string          `json:"session"`
	Agent        string          `json:"agent"`
	ToolCallID   string          `json:"tool_call_id"`
	Source       string          `json:"source"`
	Tool         string          `json:"tool"`
	Outcome      string          `json:"outcome"`
	DurationMS   float64         `json:"duration_ms"`
	InputBytes   int             `json:"input_bytes"`
	InputSHA256  string          `json:"input_sha256"`
	OutputBytes  int             `json:"output_bytes"`
	OutputSHA256 string          `json:"output_sha256,omitempty"`
	Managed      int             `json:"managed_files,omitempty"`
	Permission   []auditDecision `json:"permission,omitempty"`
	TraceID      string          `json:"trace_id,omitempty"`
}

type auditDecision struct {
	Action    string     `json:"action"`
	Resources int        `json:"resources"`
	Effect    string     `json:"effect"`
	Rule      *auditRule `json:"rule,omitempty"`
	Approved  bool       `json:"approved,omitempty"` // a saved approval allowed it
	Asked     bool       `json:"asked"`
	Reply     string     `json:"reply,omitempty"`
	Saved     bool       `json:"saved,omitempty"` // an "always" answer saved an approval
	Allowed   bool       `json:"allowed"`
	WaitMS    float64    `json:"wait_ms,omitempty"`
}

type auditRule struct {
	Index    int    `json:"index"`
	Action   string `json:"action,omitempty"`
	Resource string `json:"resource,omitempty"`
	Effect   string `json:"effect,omitempty"`
	Source   string `json:"source,omitempty"`
}

type auditSource struct {
	auditHead
	Source      string `json:"source"`
	State       string `json:"state"`
	Generation  uint64 `json:"generation"`
	Restarts    int    `json:"restarts"`
	PID         int    `json:"pid,omitempty"`
	Containment string `json:"containment,omitempty"`
	Confined    bool   `json:"confined,omitempty"`
	Error       string `json:"error,omitempty"`
}

type auditConfig struct {
	auditHead
	Change       string `json:"change"` // "activated", "changed", "deactivated"
	ConfigBytes  int    `json:"config_bytes"`
	ConfigSHA256 string `json:"config_sha256,omitempty"`
}

// auditLog appends lines to dir/audit.jsonl, rotating it by size.
type auditLog struct {
	dir      string
	maxBytes int64
	keep     int

	mu     sync.Mutex
	f      *os.File // nil after Close
	failed bool     // a write failed: said once on stderr
}

const (
	auditFile = "audit.jsonl"
	auditLock = "audit.lock"
)

func openAudit(dir string, maxBytes int64, keep int) (*auditLog, error) {
	if maxBytes <= 0 {
		maxBytes = 16 << 20
	}
	if keep <= 0 {
		keep = 8
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("telemetry: audit directory: %w", err)
	}
	a := &auditLog{dir: dir, maxBytes: maxBytes, keep: keep}
	f, err := a.open()
	if err != nil {
		return nil, err
	}
	a.f = f
	return a, nil
}

func (a *auditLog) open() (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(a.dir, auditFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("telemetry: audit trail: %w", err)
	}
	return f, nil
}

// write appends v as one JSON line, in one write, rotating first when the file has
// reached its size. A line that cannot be written is dropped, and the first such
// failure is reported on stderr: the audit trail never fails a call.
func (a *auditLog) write(v any) {
	line, err := json.Marshal(v)
	if err != nil {
		a.report(err)
		return
	}
	line = append(line, '\n')
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f == nil {
		return
	}
	if st, err := a.f.Stat(); err == nil && st.Size()+int64(len(line)) > a.maxBytes && st.Size() > 0 {
		if err := a.rotate(); err != nil {
			a.reportLocked(err)
		}
	}
	if _, err := a.f.Write(line); err != nil {
		a.reportLocked(err)
	}
}

// rotate renames a full audit.jsonl aside and opens a new one, under the lock file,
// so that of several processes sharing the directory exactly one renames it; the
// others find a new file at the path and reopen it. It keeps the newest a.keep
// rotated files.
func (a *auditLog) rotate() error {
	unlock, err := lockFile(filepath.Join(a.dir, auditLock))
	if err != nil {
		return fmt.Errorf("telemetry: audit trail: lock: %w", err)
	}
	defer unlock()
	path := filepath.Join(a.dir, auditFile)
	mine, err := a.f.Stat()
	if err != nil {
		return err
	}
	cur, err := os.Stat(path)
	if err == nil && os.SameFile(mine, cur) && cur.Size() > 0 {
		// Still the file we write and still full: ours to rotate.
		aside := filepath.Join(a.dir, "audit-"+time.Now().UTC().Format("20060102T150405.000000000Z")+"-"+strconv.Itoa(os.Getpid())+".jsonl")
		if err := os.Rename(path, aside); err != nil {
			return err
		}
		a.prune()
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	f, err := a.open()
	if err != nil {
		return err
	}
	a.f.Close()
	a.f = f
	return nil
}

// prune removes the oldest rotated files beyond a.keep.
func (a *auditLog) prune() {
	old, _ := filepath.Glob(filepath.Join(a.dir, "audit-*.jsonl"))
	slices.Sort(old) // the names sort by time
	for len(old) > a.keep {
		os.Remove(old[0])
		old = old[1:]
	}
}

func (a *auditLog) report(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.reportLocked(err)
}

func (a *auditLog) reportLocked(err error) {
	if !a.failed {
		a.failed = true
		fmt.Fprintf(os.Stderr, "toolhost: audit trail in %s: %v (lines are being lost)\n", a.dir, err)
	}
}

// Close closes the file; later writes are dropped. It is idempotent.
func (a *auditLog) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f == nil {
		return nil
	}
	err := a.f.Close()
	a.f = nil
	return err
}
