// Package termtext makes text that a tool source controls inert on a terminal:
// whatever a terminal would act on instead of showing — an escape sequence that
// writes the clipboard, sets the title, moves the cursor or clears the screen, a
// character that reorders the text around it — is shown as an escape instead.
// Tabs and newlines stay, where they only lay text out.
//
// What is shown escaped:
//   - C0 controls but tab and newline (ESC as \x1b), and a carriage return unless a
//     newline follows it (\r);
//   - DEL (\x7f) and the C1 controls U+0080–U+009F (\u009b);
//   - the bidirectional controls U+061C, U+200E, U+200F, U+202A–U+202E and
//     U+2066–U+2069 (\u202e);
//   - bytes that are not UTF-8 (\xff).
package termtext

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Inert returns s with what a terminal would act on shown escaped (see the package
// doc); tabs and newlines stay. Text without any is returned as it is, without
// allocating.
func Inert(s string) string { return escape(s, false) }

// Line is Inert for a place that holds one line, a table cell: newlines and tabs
// are shown escaped too (\n, \t).
func Line(s string) string { return escape(s, true) }

func escape(s string, line bool) string {
	i := firstUnsafe(s, line)
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		if unsafeAt(s, i, r, size, line) {
			writeEscape(&b, s[i:i+size], r, size)
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// firstUnsafe returns the index of the first character of s to escape, or len(s).
func firstUnsafe(s string, line bool) int {
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c < 0x7f {
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if unsafeAt(s, i, r, size, line) {
			return i
		}
		i += size
	}
	return len(s)
}

// unsafeAt reports whether the character r (size bytes) at s[i:] is to be escaped.
func unsafeAt(s string, i int, r rune, size int, line bool) bool {
	switch {
	case r == utf8.RuneError && size == 1:
		return true
	case r == '\t' || r == '\n':
		return line
	case r == '\r':
		return line || i+1 >= len(s) || s[i+1] != '\n'
	case r < 0x20, r >= 0x7f && r <= 0x9f:
		return true
	}
	return bidi(r)
}

// bidi reports whether r is a bidirectional formatting character.
func bidi(r rune) bool {
	return r == 0x061c || r == 0x200e || r == 0x200f || r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069
}

func writeEscape(b *strings.Builder, raw string, r rune, size int) {
	switch {
	case r == utf8.RuneError && size == 1:
		fmt.Fprintf(b, `\x%02x`, raw[0])
	case r == '\n':
		b.WriteString(`\n`)
	case r == '\t':
		b.WriteString(`\t`)
	case r == '\r':
		b.WriteString(`\r`)
	case r < 0x80:
		fmt.Fprintf(b, `\x%02x`, r)
	default:
		fmt.Fprintf(b, `\u%04x`, r)
	}
}

// Writer writes to another writer what is written to it, made Inert. A character
// split between two writes is put together first: the end of a write that may be
// the start of one is held back until the next write completes it.
// Flush writes what is held back. A Writer is not safe for concurrent use.
type Writer struct {
	w    io.Writer
	held []byte
}

// NewWriter returns a Writer writing to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write writes p, made inert, and reports len(p) unless the underlying writer
// failed.
func (w *Writer) Write(p []byte) (int, error) {
	data := p
	if len(w.held) > 0 {
		data = append(w.held, p...)
		w.held = nil
	}
	keep := incompleteTail(data)
	out := Inert(string(data[:len(data)-keep]))
	if keep > 0 {
		w.held = append([]byte(nil), data[len(data)-keep:]...)
	}
	if _, err := io.WriteString(w.w, out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes what is held back, made inert.
func (w *Writer) Flush() error {
	if len(w.held) == 0 {
		return nil
	}
	held := w.held
	w.held = nil
	_, err := io.WriteString(w.w, Inert(string(held)))
	return err
}

// incompleteTail is how many bytes at the end of p may begin a character (or a
// carriage return's newline) the next write completes.
func incompleteTail(p []byte) int {
	if n := len(p); n > 0 && p[n-1] == '\r' {
		return 1
	}
	for k := 1; k <= utf8.UTFMax-1 && k <= len(p); k++ {
		c := p[len(p)-k]
		if c < 0x80 {
			return 0
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(p[len(p)-k:]) {
				return k
			}
			return 0
		}
	}
	return 0
}
