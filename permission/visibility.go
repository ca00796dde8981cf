package permission

import "strings"

// Visibility returns a function that reports whether rules leave action visible to
// the model: false when the last rule whose action pattern matches action is a deny
// for every resource (a resource pattern made only of '*'), true otherwise. Rules are
// in order and the last match wins, so [deny * *, allow question *] shows question
// and [allow question *, deny * *] hides it; a deny for some resources ("rm *") hides
// nothing. Use it with registry.Offer. It decides what is offered, never what is
// allowed: calls still go through Assert. The rules are copied; the result is safe
// for concurrent use.
func Visibility(rules []Rule) func(action string) bool {
	rules = append([]Rule(nil), rules...)
	return func(action string) bool {
		for i := len(rules) - 1; i >= 0; i-- {
			r := rules[i]
			if Match(r.Action, action) {
				return !(r.Effect == Deny && strings.Trim(r.Resource, "*") == "")
			}
		}
		return true
	}
}
