package registry

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/toolhost/toolhost/tool"
)

// MediaTooLargeError reports a media part over Limits.MaxMediaBytes. Settlement turns it
// into an operational failure: media is never cut.
type MediaTooLargeError struct {
	Index    int    // the part's index in the content
	MIMEType string // the part's MIME type
	Size     int    // len(Data)
	Limit    int    // the MaxMediaBytes in force
}

func (e *MediaTooLargeError) Error() string {
	return fmt.Sprintf("registry: media part %d (%s) is %d bytes, over the limit of %d bytes",
		e.Index, e.MIMEType, e.Size, e.Limit)
}

// bound applies lim (zero fields meaning the defaults; invalid limits fail with
// ErrInvalidLimits) to one settlement's provider-facing channel.
//
// When content is not empty, only its text parts are measured, taken together and
// joined by "\n"; structured is not counted with them. (One guard besides, as
// docs/design.md, "Bounding and managed storage", says: structured output that is
// itself over the limits — an MCP server sending a 24 MiB file both as text and as
// structuredContent — is retained whole too and dropped from the settlement, its
// path listed in managed, so nothing unbounded reaches the provider.) A text
// resource part counts as a text part (its text is measured, retained and folded
// into the preview with the others); a binary
// resource counts as media. A media part over MaxMediaBytes fails
// with a *MediaTooLargeError before anything else is done. Text within the limits leaves
// content untouched (the same slice is returned). Text over them is retained whole in st
// and its parts are replaced by one preview part where the first text part was; other
// parts keep their order and bytes.
//
// When content is empty, structured is measured. Over the limits it is retained whole
// in st and replaced by content holding one preview part, with structured nil.
//
// managed lists the files retained. A failed retention is returned as an
// error (a *StorageError) and never as a lossy success. st must be non-nil when the
// output can exceed lim; bound is safe for concurrent use.
func bound(st retainer, lim Limits, content []tool.Part, structured []byte) (outContent []tool.Part, outStructured []byte, managed []string, err error) {
	lim = lim.WithDefaults()
	if err := lim.Validate(); err != nil {
		return nil, nil, nil, err
	}
	if len(content) == 0 {
		preview, path, err := boundText(st, lim, joinedText[[]byte]{structured})
		if err != nil {
			return nil, nil, nil, err
		}
		if path == "" {
			return content, structured, nil, nil
		}
		return []tool.Part{tool.Text(preview)}, nil, []string{path}, nil
	}

	var text joinedText[string]
	first := -1
	for i, p := range content {
		switch p.Type {
		case tool.PartMedia:
			if len(p.Data) > lim.MaxMediaBytes {
				return nil, nil, nil, &MediaTooLargeError{Index: i, MIMEType: p.MIMEType, Size: len(p.Data), Limit: lim.MaxMediaBytes}
			}
		case tool.PartResource:
			if p.IsBlob() {
				if len(p.Data) > lim.MaxMediaBytes {
					return nil, nil, nil, &MediaTooLargeError{Index: i, MIMEType: p.MIMEType, Size: len(p.Data), Limit: lim.MaxMediaBytes}
				}
				continue
			}
			// A text resource is text the model reads: measured with the text parts.
			fallthrough
		case tool.PartText:
			if first < 0 {
				first = i
			} else {
				text = append(text, "\n")
			}
			text = append(text, p.Text)
		}
	}
	if len(structured) > lim.MaxBytes || lineCount(structured) > lim.MaxLines {
		path, err := st.retain(joinedText[[]byte]{structured})
		if err != nil {
			return nil, nil, nil, err
		}
		managed = append(managed, path)
		structured = nil
	}
	preview, path, err := boundText(st, lim, text)
	if err != nil {
		return nil, nil, nil, err
	}
	if path == "" {
		return content, structured, managed, nil
	}
	managed = append(managed, path)
	out := make([]tool.Part, 0, len(content))
	for i, p := range content {
		switch {
		case i == first:
			out = append(out, tool.Text(preview))
		case p.Type != tool.PartText && (p.Type != tool.PartResource || p.IsBlob()):
			out = append(out, p)
		}
	}
	return out, structured, managed, nil
}

// retainer keeps output whole in managed storage: *Storage, or a placement's quota.
type retainer interface {
	retain(src io.WriterTo) (string, error)
}

// boundText measures t against lim. Within the limits it returns an empty path. Over
// them it retains t whole in st and returns the preview that replaces it and the path.
func boundText[T string | []byte](st retainer, lim Limits, t joinedText[T]) (preview, path string, err error) {
	size, lines := t.size(), lineCount(t...)
	if size <= lim.MaxBytes && lines <= lim.MaxLines {
		return "", "", nil
	}
	path, err = st.retain(t)
	if err != nil {
		return "", "", err
	}
	return previewOf(t, lim, truncationMarker(path, lines, size)), path, nil
}

// truncationMarker is the text between a preview's head and tail. It begins and ends
// with "\n" and names the full output's path and size.
func truncationMarker(path string, lines, size int) string {
	return fmt.Sprintf("\n[... truncated: the full output (%d lines, %d bytes) is in %s ...]\n\n", lines, size, path)
}

// previewOf returns head + marker + tail of t, within lim. It requires t to exceed lim
// and the marker to leave room (guaranteed by the floors in Limits.Validate and the
// directory cap in OpenStorage). The head takes up to half the line and byte budget,
// rounded up; the tail takes what the head leaves. Both are whole lines, except that a
// single line longer than its budget is cut, on a UTF-8 boundary.
//
// The line count stays within lim because marker ends with "\n": the preview has at
// most lineCount(head) + lineCount(marker) + lineCount(tail) lines.
func previewOf[T string | []byte](t joinedText[T], lim Limits, marker string) string {
	lineBudget := lim.MaxLines - lineCount(marker)
	byteBudget := lim.MaxBytes - len(marker)
	size := t.size()

	headBytes := min(size, byteBudget-byteBudget/2)
	head := headLines(t.slice(0, headBytes), lineBudget-lineBudget/2, headBytes == size)

	// The tail window never overlaps the head, so head and tail are disjoint.
	start := max(len(head), size-(byteBudget-len(head)))
	lineStart := start == 0 || t.slice(start-1, start) == "\n"
	tail := tailLines(t.slice(start, size), lineBudget-lineCount(head), lineStart)

	return head + marker + tail
}

// headLines returns the longest prefix of w made of at most maxLines whole lines, w
// being the start of a text and atEnd reporting whether it is the whole text. If not even
// the first line fits, it returns w without a trailing partial UTF-8 character.
func headLines(w string, maxLines int, atEnd bool) string {
	end := 0
	for n := 0; n < maxLines && end < len(w); n++ {
		i := strings.IndexByte(w[end:], '\n')
		if i < 0 {
			if atEnd {
				end = len(w)
			}
			break
		}
		end += i + 1
	}
	if end == 0 {
		return trimPartialRuneEnd(w)
	}
	return w[:end]
}

// tailLines returns the longest suffix of w made of at most maxLines whole lines, w
// being the end of a text and atStart reporting whether w begins a line. If not even the
// last line fits, it returns w without a leading partial UTF-8 character.
func tailLines(w string, maxLines int, atStart bool) string {
	start := len(w)
	for n := 0; n < maxLines && start > 0; n++ {
		// The line ending at start (its "\n" included) begins after the previous "\n".
		i := strings.LastIndexByte(w[:start-1], '\n')
		if i < 0 {
			if atStart {
				start = 0
			}
			break
		}
		start = i + 1
	}
	if start == len(w) {
		return trimPartialRuneStart(w)
	}
	return w[start:]
}

// trimPartialRuneEnd drops an incomplete UTF-8 sequence from the end of s.
func trimPartialRuneEnd(s string) string {
	for i := len(s) - 1; i >= 0 && i >= len(s)-utf8.UTFMax; i-- {
		if utf8.RuneStart(s[i]) {
			if !utf8.FullRuneInString(s[i:]) {
				return s[:i]
			}
			break
		}
	}
	return s
}

// trimPartialRuneStart drops the continuation bytes of a UTF-8 sequence begun before s.
// Invalid UTF-8 with more continuation bytes than a sequence can have is left as is.
func trimPartialRuneStart(s string) string {
	for i := 0; i < len(s) && i < utf8.UTFMax; i++ {
		if utf8.RuneStart(s[i]) {
			return s[i:]
		}
	}
	return s
}

// lineCount is the one definition of a text's line count, used both for measuring and
// for previews: the number of "\n" plus one if the text does not end with "\n"; empty
// text has no lines. The text is the concatenation of segs.
func lineCount[T string | []byte](segs ...T) int {
	n, last := 0, byte('\n')
	for _, s := range segs {
		if len(s) == 0 {
			continue
		}
		switch s := any(s).(type) {
		case string:
			n += strings.Count(s, "\n")
		case []byte:
			n += bytes.Count(s, []byte{'\n'})
		}
		last = s[len(s)-1]
	}
	if last != '\n' {
		n++
	}
	return n
}

// joinedText is the text being bounded as the concatenation of its segments (text parts
// with "\n" segments between them, or structured JSON as one segment), which is never
// built in memory.
type joinedText[T string | []byte] []T

func (t joinedText[T]) size() int {
	n := 0
	for _, s := range t {
		n += len(s)
	}
	return n
}

// slice returns bytes i to j of the text. It copies nothing when they lie in one string
// segment.
func (t joinedText[T]) slice(i, j int) string {
	var b strings.Builder
	for _, s := range t {
		lo, hi := min(max(i, 0), len(s)), min(max(j, 0), len(s))
		if lo == i && hi == j {
			return string(s[lo:hi])
		}
		b.WriteString(string(s[lo:hi]))
		i, j = i-len(s), j-len(s)
	}
	return b.String()
}

// WriteTo writes the text to w straight from its segments.
func (t joinedText[T]) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for _, s := range t {
		var n int
		var err error
		switch s := any(s).(type) {
		case string:
			n, err = io.WriteString(w, s)
		case []byte:
			n, err = w.Write(s)
		}
		total += int64(n)
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// boundMessage bounds the text of a refusal (every settlement but a completed one)
// by lim, as bound does output: within the limits it returns the whole text, all of
// m's problems and no path. Over them it retains the whole text in st, returns its
// path, and replaces the text by a preview that names the path. For a message without
// problems the preview is the text's head and tail, as for output. For a problem
// list it is the first line, as many problems as fit with a line saying how many
// were left out, and the trailing lines, each line cut to maxLineBytes; problems
// is then the problems shown, cut the same way. A failed retention is returned as an
// error (a *StorageError).
func boundMessage(st retainer, lim Limits, m refusalText) (text string, problems []Problem, path string, err error) {
	lim = lim.WithDefaults()
	if err := lim.Validate(); err != nil {
		return "", nil, "", err
	}
	full := m.segments()
	size, lines := full.size(), lineCount(full...)
	if size <= lim.MaxBytes && lines <= lim.MaxLines {
		return full.slice(0, size), m.problems, "", nil
	}
	if path, err = st.retain(full); err != nil {
		return "", nil, "", err
	}
	if len(m.problems) > 0 {
		if text, problems, ok := problemPreview(m, lim, path, lines, size); ok {
			return text, problems, path, nil
		}
	}
	return previewOf(full, lim, messageMarker(path, lines, size)), nil, path, nil
}

// messageMarker is the text between a refusal preview's head and tail, as
// truncationMarker is for output.
func messageMarker(path string, lines, size int) string {
	return fmt.Sprintf("\n[... truncated: the whole message (%d lines, %d bytes) is in %s ...]\n\n", lines, size, path)
}

// problemPreview lays out the preview of a problem list over lim (see boundMessage),
// the whole message having lines lines and size bytes and being retained at path.
// It reports false when lim leaves no room for that layout.
func problemPreview(m refusalText, lim Limits, path string, lines, size int) (string, []Problem, bool) {
	lineBytes := maxLineBytes(lim)
	head := cutLine(m.head, lineBytes)
	tail := make([]string, len(m.tail))
	// Each line after the head begins with its "\n" and has no other (see cutLine).
	byteBudget, lineBudget := lim.MaxBytes-len(head), lim.MaxLines-1-len(m.tail)-1
	for i, line := range m.tail {
		tail[i] = "\n" + cutLine(line, lineBytes)
		byteBudget -= len(tail[i])
	}
	// The marker is sized for the most problems it can name.
	marker := func(left int) string {
		if left == 0 {
			return fmt.Sprintf("\n[... lines cut: the whole message (%d lines, %d bytes) is in %s ...]", lines, size, path)
		}
		return fmt.Sprintf("\n[... %d more problems left out: the whole message (%d lines, %d bytes) is in %s ...]", left, lines, size, path)
	}
	byteBudget -= len(marker(len(m.problems)))

	var b strings.Builder
	b.WriteString(head)
	var shown []Problem
	for _, p := range m.problems {
		p = Problem{Pointer: cutLine(p.Pointer, lineBytes/2), Message: cutLine(p.Message, lineBytes/2)}
		line := "\n- " + p.String()
		if len(line) > byteBudget || lineBudget < 1 {
			break
		}
		byteBudget -= len(line)
		lineBudget--
		b.WriteString(line)
		shown = append(shown, p)
	}
	if len(shown) == 0 {
		return "", nil, false
	}
	b.WriteString(marker(len(m.problems) - len(shown)))
	for _, line := range tail {
		b.WriteString(line)
	}
	return b.String(), shown, true
}

// maxLineBytes is the longest line a problem list's preview keeps of each line: an
// eighth of the byte limit, at most 2 KiB.
func maxLineBytes(lim Limits) int { return min(lim.MaxBytes/8, 2048) }

// cutLine returns s when it is at most n bytes, else its first bytes (on a UTF-8
// boundary) followed by "…", n bytes at most. A line break in s ends the line there.
func cutLine(s string, n int) string {
	const ellipsis = "…"
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " " + ellipsis
	}
	if len(s) <= n {
		return s
	}
	return trimPartialRuneEnd(s[:max(n-len(ellipsis), 0)]) + ellipsis
}
