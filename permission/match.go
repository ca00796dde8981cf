package permission

import (
	"strings"
	"unicode/utf8"
)

// Match reports whether s matches the wildcard pattern. In a pattern, '*' matches any
// run of characters, '/' included, '?' matches exactly one character (one UTF-8
// encoded rune; an invalid byte counts as one character), and every other character
// matches itself. A pattern ending in " *" also matches what precedes that suffix
// alone, so "git *" matches "git" as well as "git status". Match never fails and is
// safe for concurrent use; it runs in O(len(pattern)·len(s)) time.
func Match(pattern, s string) bool {
	if match(pattern, s) {
		return true
	}
	if bare, ok := strings.CutSuffix(pattern, " *"); ok {
		return match(bare, s)
	}
	return false
}

// match is the classic greedy wildcard match with one backtracking point: on a
// mismatch, retry from the latest '*' with it absorbing one more character.
func match(p, s string) bool {
	pi, si := 0, 0
	star, mark := -1, 0 // position after the latest '*' in p, and where s resumed
	for si < len(s) {
		if pi < len(p) {
			switch c := p[pi]; c {
			case '*':
				pi++
				star, mark = pi, si
				continue
			case '?':
				_, w := utf8.DecodeRuneInString(s[si:])
				pi++
				si += w
				continue
			default:
				pr, pw := utf8.DecodeRuneInString(p[pi:])
				sr, sw := utf8.DecodeRuneInString(s[si:])
				if pr == sr && (pr != utf8.RuneError || pw == sw && p[pi:pi+pw] == s[si:si+sw]) {
					pi += pw
					si += sw
					continue
				}
			}
		}
		if star < 0 {
			return false
		}
		_, w := utf8.DecodeRuneInString(s[mark:])
		mark += w
		pi, si = star, mark
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

// effectOf is the effect of the rules and saved approvals for one resource of a
// request from source. A rule with a Source applies only when its pattern matches
// source; a saved approval with a Source only to exactly that source (one without,
// saved before sources were recorded, to every source). The last matching rule
// decides; a saved approval turns Ask into Allow. The caller holds s.mu.
func (s *Service) effectOf(source, action, resource string) Effect {
	eff := Ask
	for _, r := range s.rules {
		if (r.Source == "" || Match(r.Source, source)) && Match(r.Action, action) && Match(r.Resource, resource) {
			eff = r.Effect
		}
	}
	if eff != Ask {
		return eff
	}
	for _, a := range s.saved {
		if (a.Source == "" || a.Source == source) && Match(a.Action, action) && Match(a.Resource, resource) {
			return Allow
		}
	}
	return Ask
}

// deciderLocked says what decided eff for req, whose resources had the effects
// each: the index of the last configured rule matching the first resource with
// effect eff (-1: none matched), and whether a saved approval allowed it. The
// caller holds s.mu.
func (s *Service) deciderLocked(req Request, each []Effect, eff Effect) (rule int, approved bool) {
	source := req.Source.ToolSource
	for i, res := range resourcesOf(req) {
		if each[i] != eff {
			continue
		}
		rule = -1
		for j, r := range s.rules {
			if (r.Source == "" || Match(r.Source, source)) && Match(r.Action, req.Action) && Match(r.Resource, res) {
				rule = j
			}
		}
		return rule, eff == Allow && (rule < 0 || s.rules[rule].Effect == Ask)
	}
	return -1, false
}
