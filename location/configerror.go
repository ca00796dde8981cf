package location

// ConfigError and the helpers that locate and word a problem in a config document.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

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
