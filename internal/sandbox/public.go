package sandbox

import "github.com/toolhost/toolhost/sandbox"

// SpecOf is the Spec of a source's public configuration (package
// github.com/toolhost/toolhost/sandbox): the same Mode, Confinement (copied) and
// Limits' fields.
func SpecOf(s sandbox.Spec) Spec {
	spec := Spec{
		Name: s.Name, Contain: s.Contain, Mode: s.Mode, Limits: Limits(s.Limits),
		HostPID: s.HostPID, Require: s.Require,
	}
	if s.Confine != nil {
		c := *s.Confine
		spec.Confine = &c
	}
	return spec
}
