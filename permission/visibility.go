package permission

import "strings"

// Visibility returns a function that reports whether rules leave action, asked by
// a tool of source (a Source.ToolSource: "builtin", "plugin:NAME", "mcp:NAME",
// "manifest:NAME"), visible to the model: false when the last rule that applies to
// source and whose action pattern matches action is a deny for every resource (a
// resource pattern made only of '*'), true otherwise. A rule applies to source as
// it does in Assert: a rule without Source to every source, one with Source only
// to the sources its pattern matches. Rules are in order and the last match wins,
// so [deny * *, allow question *] shows question and [allow question *, deny * *]
// hides it; a deny for some resources ("rm *") hides nothing, and a deny naming
// "mcp:srv" hides that server's tools only. Use it with registry.Offer. It decides
// what is offered, never what is allowed: calls still go through Assert. The rules
// are copied; the result is safe for concurrent use.
func Visibility(rules []Rule) func(source, action string) bool {
	rules = append([]Rule(nil), rules...)
	return func(source, action string) bool { return visible(rules, source, action) }
}

// Visible reports whether the Service's configured rules leave action of a tool of
// source visible to the model (see Visibility). It is safe for concurrent use.
func (s *Service) Visible(source, action string) bool {
	s.mu.Lock()
	rules := s.rules // SetRules replaces the slice, never changes it in place
	s.mu.Unlock()
	return visible(rules, source, action)
}

func visible(rules []Rule, source, action string) bool {
	for i := len(rules) - 1; i >= 0; i-- {
		r := rules[i]
		if (r.Source == "" || Match(r.Source, source)) && Match(r.Action, action) {
			return !(r.Effect == Deny && strings.Trim(r.Resource, "*") == "")
		}
	}
	return true
}
