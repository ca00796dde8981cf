package sandbox

import "github.com/toolhost/toolhost/sandbox"

// SpecOf is the Spec of a source's public configuration (package
// github.com/toolhost/toolhost/sandbox), which mirrors Spec field for field.
func SpecOf(s sandbox.Spec) Spec {
	spec := Spec{
		Name: s.Name, Contain: s.Contain, Mode: Mode(s.Mode), Limits: Limits(s.Limits),
		HostPID: s.HostPID, Require: s.Require,
	}
	if s.Confine != nil {
		c := s.Confine
		spec.Confine = &Confinement{Read: c.Read, Write: c.Write, Network: c.Network, Tmp: TmpLimits(c.Tmp)}
	}
	return spec
}
