package registry

import (
	"fmt"
	"regexp"
	"strings"
	"sync"
)

// nameGrammar is compiled on first use: its counted repetition makes compiling it
// cost enough to show in every toolhost command's start.
var nameGrammar = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,63}$`) })

// NormalizeName derives the model-facing name from an authored name: every character
// outside [A-Za-z0-9_-] becomes "_", and the result must match
// ^[A-Za-z][A-Za-z0-9_-]{0,63}$.
func NormalizeName(authored string) (string, error) {
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			return r
		}
		return '_'
	}, authored)
	if !nameGrammar().MatchString(name) {
		return "", fmt.Errorf("name %q (normalized %q) must start with a letter and have 1 to 64 characters of [A-Za-z0-9_-]", authored, name)
	}
	return name, nil
}

// foldName is the form in which names that differ only by letter case are equal.
// Normalized names are ASCII, so lower-casing is the whole fold; a name without
// upper-case letters is returned as is, without allocating.
func foldName(name string) string { return strings.ToLower(name) }
