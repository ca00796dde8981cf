package termtext_test

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/toolhost/toolhost/internal/termtext"
)

func TestInert(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"plain text, 100%", "plain text, 100%"},
		{"two\nlines\tand a tab", "two\nlines\tand a tab"},
		{"windows\r\nline", "windows\r\nline"},
		{"over\rwrite", `over\rwrite`},
		{"\x1b]52;c;ZXZpbA==\x07", `\x1b]52;c;ZXZpbA==\x07`},
		{"\x1b[2J\x1b[1;1H$ ", `\x1b[2J\x1b[1;1H$ `},
		{"\u009b31m", `\u009b31m`},
		{"a\u202eb\u2066c\u200fd\u061c", `a\u202eb\u2066c\u200fd\u061c`},
		{"del\x7f", `del\x7f`},
		{"bad \xff\xfe utf-8", `bad \xff\xfe utf-8`},
		{"ünïcödé ✓ 日本", "ünïcödé ✓ 日本"},
		{"cr at end\r", `cr at end\r`},
	} {
		if got := termtext.Inert(tt.in); got != tt.want {
			t.Errorf("Inert(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if got := termtext.Line("a\nb\tc\r\n"); got != `a\nb\tc\r\n` {
		t.Errorf("Line = %q", got)
	}
}

func TestInertAllocatesNothingForSafeText(t *testing.T) {
	s := strings.Repeat("a safe line, ✓\n", 100)
	if n := testing.AllocsPerRun(10, func() { termtext.Inert(s) }); n != 0 {
		t.Errorf("%v allocations", n)
	}
}

func TestWriterJoinsSplitCharacters(t *testing.T) {
	in := "é✓\u202e\x1b[2J日\r\n"
	for split := range len(in) + 1 {
		var b bytes.Buffer
		w := termtext.NewWriter(&b)
		w.Write([]byte(in[:split]))
		w.Write([]byte(in[split:]))
		w.Flush()
		if got, want := b.String(), termtext.Inert(in); got != want {
			t.Errorf("split at %d: %q, want %q", split, got, want)
		}
	}
}

func FuzzInert(f *testing.F) {
	f.Add("\x1b]0;title\x07 text\n\u202e")
	f.Fuzz(func(t *testing.T, s string) {
		out := termtext.Inert(s)
		if !utf8.ValidString(out) {
			t.Fatalf("%q: invalid UTF-8 out: %q", s, out)
		}
		for i, r := range out {
			if (r < 0x20 && r != '\n' && r != '\t' && r != '\r') || (r >= 0x7f && r <= 0x9f) || r == 0x202e || r == 0x2066 {
				t.Fatalf("%q: %q left at %d of %q", s, r, i, out)
			}
			if r == '\r' && (i+1 >= len(out) || out[i+1] != '\n') {
				t.Fatalf("%q: a lone carriage return left in %q", s, out)
			}
		}
		if termtext.Inert(out) != out {
			t.Fatalf("%q: Inert is not idempotent: %q", s, out)
		}
	})
}
