package mcp_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolhost/toolhost/mcp"
	"github.com/toolhost/toolhost/registry"
)

// filesystem starts @modelcontextprotocol/server-filesystem as server "fs" over dir.
func filesystem(h *host, dir string, edit func(*mcp.Config)) *mcp.Supervisor {
	cfg := h.config("fs", serverScript("server-filesystem"), dir)
	if edit != nil {
		edit(&cfg)
	}
	return h.supervise(cfg)
}

// bigText writes a text file of about size bytes: numbered lines.
func bigText(t *testing.T, dir string, size int) (string, []byte) {
	t.Helper()
	var b bytes.Buffer
	for i := 0; b.Len() < size; i++ {
		fmt.Fprintf(&b, "line %08d: the quick brown fox jumps over the lazy dog\n", i)
	}
	path := filepath.Join(dir, "big.txt")
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, b.Bytes()
}

func TestFilesystem(t *testing.T) {
	h := newHost(t)
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	filesystem(h, dir, nil)

	t.Run("IsErrorIsToolFailure", func(t *testing.T) {
		in, _ := json.Marshal(map[string]string{"path": filepath.Join(dir, "missing.txt")})
		st, err := h.settle(t.Context(), "fs_read_text_file", string(in))
		if err != nil {
			t.Fatal(err)
		}
		if st.Outcome != registry.ToolFailed || !strings.Contains(st.Text(), "ENOENT") {
			t.Errorf("settlement = %s %q, want a tool failure naming ENOENT", st.Outcome, st.Text())
		}
	})

	t.Run("LargeFileIsBoundedIntoManagedStorage", func(t *testing.T) {
		// ~24 MiB of text: the response carries it twice (content and
		// structuredContent), ~48 MiB on one line, past the go-sdk's own 16 MiB cap.
		path, want := bigText(t, dir, 24<<20)
		in, _ := json.Marshal(map[string]string{"path": path})
		st := mustSettle(t, h, "fs_read_text_file", string(in))
		// Two files: the structured copy (too large to publish beside the text) and
		// the text the preview names; the text's is the last.
		if len(st.ManagedPaths) != 2 || st.Structured != nil {
			t.Fatalf("managed paths = %v, structured %d bytes; want both copies retained and none published", st.ManagedPaths, len(st.Structured))
		}
		textFile := st.ManagedPaths[1]
		got, err := os.ReadFile(textFile)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("managed file has %d bytes, want the file's %d", len(got), len(want))
		}
		if n := len(st.Text()); n > 51200 {
			t.Errorf("preview is %d bytes, over the default limit", n)
		}
		if !strings.Contains(st.Text(), textFile) {
			t.Errorf("preview does not name the managed file")
		}
	})
}

func TestMessageCap(t *testing.T) {
	h := newHost(t)
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const limit = 1 << 20
	filesystem(h, dir, func(c *mcp.Config) { c.MaxMessageBytes = limit })
	path, _ := bigText(t, dir, 2<<20)
	in, _ := json.Marshal(map[string]string{"path": path})

	_, err = h.settle(t.Context(), "fs_read_text_file", string(in))
	var tooLarge *mcp.MessageTooLargeError
	var op *registry.OperationalError
	if !errors.As(err, &tooLarge) || !errors.As(err, &op) {
		t.Fatalf("err = %v, want an operational *MessageTooLargeError", err)
	}
	if tooLarge.Limit != limit || tooLarge.Size <= limit || !strings.Contains(err.Error(), fmt.Sprintf("over the %d-byte message cap", limit)) {
		t.Errorf("err = %v, want it to state the cap", err)
	}

	// The session survives: the next call works.
	in, _ = json.Marshal(map[string]any{"path": path, "head": 1})
	st := mustSettle(t, h, "fs_read_text_file", string(in))
	if !strings.HasPrefix(st.Text(), "line 00000000") {
		t.Errorf("text = %.40q, want the file's first line", st.Text())
	}
}
