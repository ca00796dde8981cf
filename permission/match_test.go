package permission_test

import (
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/toolhost/toolhost/permission"
)

func TestMatch(t *testing.T) {
	tests := []struct {
		pattern, s string
		want       bool
	}{
		{"*", "", true},
		{"*", "anything/at/all", true},
		{"read", "read", true},
		{"read", "reads", false},
		{"read", "rea", false},
		{"src/*", "src/a.go", true},
		{"src/*", "src/deep/er/a.go", true}, // '*' crosses '/'
		{"src/*", "src", false},
		{"src/*", "srcs/a", false},
		{"*.go", "a/b/c.go", true},
		{"*.go", "a/b/c.go.txt", false},
		{"a*b*c", "aXXbYYc", true},
		{"a*b*c", "aXXbYY", false},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{"a?c", "a/c", true},
		{"a?c", "aéc", true}, // one character, two bytes
		{"??", "é", false},
		{"e*", "école", false}, // no folding of accents
		{"é*", "étude", true},
		{"git *", "git", true}, // the bare command
		{"git *", "git status", true},
		{"git *", "git  ", true},
		{"git *", "gitx", false},
		{"git *", "gi", false},
		{"rm -rf *", "rm -rf", true},
		{"a* *", "abc", true},
		{"[ab]", "a", false}, // no character classes: brackets are literal
		{"[ab]", "[ab]", true},
		{`a\*`, `a\b`, true}, // no escapes: backslash is literal
		{"**", "x/y", true},
		{"", "", true},
		{"", "x", false},
	}
	for _, tt := range tests {
		if got := permission.Match(tt.pattern, tt.s); got != tt.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tt.pattern, tt.s, got, tt.want)
		}
	}
}

// reference builds the regexp the wildcard rules describe.
func reference(pattern string) *regexp.Regexp {
	conv := func(p string) string {
		var b strings.Builder
		for _, r := range p {
			switch r {
			case '*':
				b.WriteString(".*")
			case '?':
				b.WriteString(".")
			default:
				b.WriteString(regexp.QuoteMeta(string(r)))
			}
		}
		return b.String()
	}
	expr := conv(pattern)
	if bare, ok := strings.CutSuffix(pattern, " *"); ok {
		expr = conv(bare) + "(?: .*)?"
	}
	return regexp.MustCompile(`(?s)\A(?:` + expr + `)\z`)
}

func FuzzMatch(f *testing.F) {
	for _, seed := range [][2]string{
		{"*", ""}, {"git *", "git"}, {"a?c", "aéc"}, {"src/*", "src/a/b"},
		{"*a*b", "xaxbxab"}, {"?*?", "ab"}, {"* *", " "}, {"\uFFFD", "\xff"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, pattern, s string) {
		got := permission.Match(pattern, s)
		if !utf8.ValidString(pattern) || !utf8.ValidString(s) {
			// The regexp reference decodes invalid bytes as U+FFFD; Match compares
			// them byte for byte. Only require that Match terminates and that a
			// string matches itself when it holds no wildcard.
			if !strings.ContainsAny(pattern, "*?") && pattern == s && !got {
				t.Errorf("Match(%q, %q) = false for an identical literal", pattern, s)
			}
			return
		}
		if want := reference(pattern).MatchString(s); got != want {
			t.Errorf("Match(%q, %q) = %v, reference says %v", pattern, s, got, want)
		}
	})
}
