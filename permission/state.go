package permission

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// stateVersion is the format version of the saved-approvals file.
const stateVersion = 1

// stateFile is the JSON document of saved approvals:
//
//	{"version": 1, "approvals": [{"action": "read", "resource": "src/*", "source": "builtin"}]}
//
// Every approval is an allow rule. "source" is the tool source the approval was
// given to (see Source.ToolSource); an approval without one (saved before sources
// were recorded, or for a request with no known source) applies to every source.
type stateFile struct {
	Version   int        `json:"version"`
	Approvals []approval `json:"approvals"`
}

type approval struct {
	Action   string `json:"action"`
	Resource string `json:"resource"`
	Source   string `json:"source,omitempty"`
}

// loadState reads the approvals in path. A missing file holds none. Anything else
// that is not a well-formed document — unreadable, empty, bad JSON, unknown fields,
// an unknown version, an approval with an empty field — is a *StateError, so a
// damaged file neither grants by accident nor loses the rest silently.
func loadState(path string) ([]approval, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, &StateError{File: path, Op: "load", Err: err}
	}
	fail := func(format string, args ...any) error {
		return &StateError{File: path, Op: "load", Err: fmt.Errorf(format, args...)}
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fail("file is empty")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var doc struct {
		Version   *int        `json:"version"`
		Approvals *[]approval `json:"approvals"`
	}
	if err := dec.Decode(&doc); err != nil {
		return nil, fail("%s", describeJSONError(data, err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fail("unexpected data after the JSON document")
	}
	switch {
	case doc.Version == nil:
		return nil, fail(`missing "version"`)
	case *doc.Version != stateVersion:
		return nil, fail(`unsupported "version" %d (want %d)`, *doc.Version, stateVersion)
	case doc.Approvals == nil:
		return nil, fail(`missing "approvals"`)
	}
	for i, a := range *doc.Approvals {
		if a.Action == "" {
			return nil, fail(`/approvals/%d/action: must be a non-empty string`, i)
		}
		if a.Resource == "" {
			return nil, fail(`/approvals/%d/resource: must be a non-empty string`, i)
		}
	}
	return *doc.Approvals, nil
}

// describeJSONError says what is wrong and where, by line and column.
func describeJSONError(data []byte, err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("invalid JSON at %s: %v", position(data, syn.Offset), syn)
	case errors.As(err, &typ) && typ.Field == "":
		return "the document must be a JSON object"
	case errors.As(err, &typ):
		return fmt.Sprintf("at %s: %q must not be a JSON %s", position(data, typ.Offset), typ.Field, typ.Value)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "truncated JSON document"
	}
	return strings.TrimPrefix(err.Error(), "json: ") // such as `unknown field "x"`
}

func position(data []byte, off int64) string {
	off = min(max(off, 0), int64(len(data)))
	before := data[:off]
	line := bytes.Count(before, []byte("\n")) + 1
	col := int(off) - (bytes.LastIndexByte(before, '\n') + 1)
	return fmt.Sprintf("line %d, column %d", line, col)
}

// saveState writes the approvals to path atomically: a temporary file in the same
// directory, synced, renamed over path, then the directory synced. The directory is
// created (0700) if missing; the file is 0600.
func saveState(path string, approvals []approval) (err error) {
	defer func() {
		if err != nil {
			err = &StateError{File: path, Op: "save", Err: err}
		}
	}()
	data, err := json.MarshalIndent(stateFile{Version: stateVersion, Approvals: approvals}, "", "  ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		// Make the rename durable; a failure here does not undo the saved content.
		d.Sync()
		d.Close()
	}
	return nil
}
