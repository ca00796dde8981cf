package permission

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/toolhost/toolhost/internal/filestore"
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

// statePolicy is what a saved-approvals file may be: a regular file of at most 16
// MiB in a directory of the user's own, which no one else may write, since what
// it holds grants.
var statePolicy = filestore.Policy{Private: true, MaxBytes: 16 << 20}

// loadState reads the approvals in path. A missing file holds none. Anything else
// that is not a well-formed document — unreadable, refused by statePolicy (a
// symbolic link, a directory others may write, a huge file), empty, bad JSON,
// unknown fields, an unknown version, an approval with an empty field — is a
// *StateError, so a damaged or planted file neither grants by accident nor loses
// the rest silently.
func loadState(path string) ([]approval, error) {
	data, err := statePolicy.ReadFile(path)
	if data == nil && err == nil {
		return nil, nil
	}
	if err != nil {
		return nil, &StateError{File: path, Op: "load", Err: err}
	}
	return parseState(path, data)
}

// parseState decodes the contents of the state file path, as loadState does.
func parseState(path string, data []byte) ([]approval, error) {
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

// addState adds approvals to the state file path, merging them with its latest
// contents: under the file's lock (see internal/filestore) it re-reads the file,
// appends those of approvals it lacks, and writes it atomically (a temporary file
// in the same directory, synced, renamed over path, then the directory synced). It
// returns the approvals the file now holds and its FileInfo. The directory is
// created (0700) if missing; the file is 0600. A file or directory statePolicy
// refuses is a *StateError, and nothing is written. An approval another process saved
// meanwhile is kept, as is one removed by hand: only the latest file is merged.
func addState(path string, add []approval) (all []approval, fi fs.FileInfo, err error) {
	l, err := statePolicy.Lock(path)
	if err != nil {
		return nil, nil, &StateError{File: path, Op: "save", Err: err}
	}
	defer l.Unlock()
	data, err := l.Read()
	if err != nil {
		return nil, nil, &StateError{File: path, Op: "save", Err: err}
	}
	if data != nil {
		if all, err = parseState(path, data); err != nil {
			return nil, nil, err
		}
	}
	changed := false
	for _, a := range add {
		if !slices.Contains(all, a) {
			all = append(all, a)
			changed = true
		}
	}
	if changed || data == nil {
		data, err := json.MarshalIndent(stateFile{Version: stateVersion, Approvals: all}, "", "  ")
		if err != nil {
			return nil, nil, &StateError{File: path, Op: "save", Err: err}
		}
		if err := l.Write(append(data, '\n'), 0o600); err != nil {
			return nil, nil, &StateError{File: path, Op: "save", Err: err}
		}
	}
	fi, err = os.Stat(path)
	if err != nil {
		return nil, nil, &StateError{File: path, Op: "save", Err: err}
	}
	return all, fi, nil
}
