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

	"github.com/toolhost/toolhost/internal/filestore"
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

// auditLog appends lines to dir/audit.jsonl, rotating it by size. Every append
// and rotation happens under the lock file dir/audit.lock, which every process
// writing the directory's trail takes, so a line that only partly reached the disk
// (the disk filled up) can be undone before anyone appends after it.
type auditLog struct {
	dir      string
	maxBytes int64
	keep     int

	mu     sync.Mutex
	f      *os.File // nil after Close
	lock   *os.File // audit.lock, open while f is
	end    int64    // where f ended after this log's last append; -1: unknown
	failed bool     // a write failed: said once on stderr, until writing resumes
	lost   int      // lines dropped since writing last succeeded
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
	// Others who may write the directory could plant a link where a line goes.
	if err := filestore.CheckDir(dir); err != nil {
		return nil, fmt.Errorf("telemetry: audit directory: %w", err)
	}
	lock, err := openNoLink(filepath.Join(dir, auditLock), os.O_RDWR|os.O_CREATE)
	if err != nil {
		return nil, err
	}
	a := &auditLog{dir: dir, maxBytes: maxBytes, keep: keep, lock: lock, end: -1}
	f, err := a.open()
	if err != nil {
		lock.Close()
		return nil, err
	}
	a.f = f
	return a, nil
}

func (a *auditLog) open() (*os.File, error) {
	// Read too: an append looks at the file's last byte (see appendLocked).
	return openNoLink(filepath.Join(a.dir, auditFile), os.O_RDWR|os.O_APPEND|os.O_CREATE)
}

// openNoLink opens a file of the audit trail (mode 0600 when made) unless it is a
// symbolic link, which the trail never writes through.
func openNoLink(path string, flag int) (*os.File, error) {
	f, err := os.OpenFile(path, flag|filestore.NoFollow, 0o600)
	if err != nil {
		if fi, lerr := os.Lstat(path); lerr == nil && fi.Mode()&os.ModeSymlink != 0 {
			return nil, fmt.Errorf("telemetry: audit trail: %s is a symbolic link, which the audit trail never writes through; remove it", path)
		}
		return nil, fmt.Errorf("telemetry: audit trail: %w", err)
	}
	return f, nil
}

// write appends v as one JSON line (see appendLocked). A line that cannot be
// written is dropped: the first such failure is reported on stderr, and so is
// the number of lines lost once writing resumes. The audit trail never fails a
// call.
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
	if err := a.appendLocked(line); err != nil {
		a.lost++
		a.reportLocked(err)
		return
	}
	if a.lost > 0 {
		fmt.Fprintf(os.Stderr, "toolhost: audit trail in %s: writing again; %d lines were lost\n", a.dir, a.lost)
		a.failed, a.lost = false, 0
	}
}

// appendLocked appends line, whole or not at all, in one write under the
// directory's lock: it first moves to the trail's current file when another
// process rotated it, rotates the file when line would take it past its size, and
// ends a torn last line (a process died writing it) so that line starts a line of
// its own. A write that fails part way is undone (the file truncated back; where
// the system refuses that, as Windows does for a file opened to append, the next
// append ends the torn line).
func (a *auditLog) appendLocked(line []byte) error {
	if err := filestore.LockFile(a.lock); err != nil {
		return fmt.Errorf("lock %s: %w", a.lock.Name(), err)
	}
	defer filestore.UnlockFile(a.lock)
	path := filepath.Join(a.dir, auditFile)
	mine, err := a.f.Stat()
	if err != nil {
		return err
	}
	cur, err := os.Stat(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err != nil || !os.SameFile(mine, cur) { // rotated by another process
		if err := a.reopen(); err != nil {
			return err
		}
		if mine, err = a.f.Stat(); err != nil {
			return err
		}
	}
	if size := mine.Size(); size > 0 && size+int64(len(line)) > a.maxBytes {
		if err := a.rotateLocked(); err != nil {
			a.reportLocked(err) // the line goes to the full file
		} else if mine, err = a.f.Stat(); err != nil {
			return err
		}
	}
	// Only a file that another process appended to since this log did may end
	// in a torn line.
	size := mine.Size()
	if size > 0 && size != a.end {
		var last [1]byte
		if _, err := a.f.ReadAt(last[:], size-1); err != nil {
			return err
		}
		if last[0] != '\n' {
			line = append([]byte{'\n'}, line...)
		}
	}
	a.end = -1
	if n, err := a.f.Write(line); err != nil {
		if n > 0 {
			if terr := a.f.Truncate(size); terr != nil {
				return errors.Join(err, fmt.Errorf("undo a torn line: %w", terr))
			}
		}
		return err
	}
	a.end = size + int64(len(line))
	return nil
}

// rotateLocked renames the full audit.jsonl aside and opens a new one; the lock is
// held, so of several processes sharing the directory exactly one renames it and
// the others move to the new file at their next append. It keeps the newest
// a.keep rotated files.
func (a *auditLog) rotateLocked() error {
	path := filepath.Join(a.dir, auditFile)
	aside := filepath.Join(a.dir, "audit-"+time.Now().UTC().Format("20060102T150405.000000000Z")+"-"+strconv.Itoa(os.Getpid())+".jsonl")
	if err := os.Rename(path, aside); err != nil {
		return err
	}
	a.prune()
	return a.reopen()
}

// reopen opens the file at the trail's path in place of a.f.
func (a *auditLog) reopen() error {
	f, err := a.open()
	if err != nil {
		return err
	}
	a.f.Close()
	a.f, a.end = f, -1
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
	err := errors.Join(a.f.Close(), a.lock.Close())
	a.f = nil
	return err
}
