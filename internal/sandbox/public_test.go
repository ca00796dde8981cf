package sandbox_test

import (
	"reflect"
	"testing"

	"github.com/toolhost/toolhost/internal/sandbox"
	sandboxcfg "github.com/toolhost/toolhost/sandbox"
)

// SpecOf carries every field of a source's public sandbox configuration: a Spec
// with all of them set converts to a Spec with none left zero, so a field added on
// one side only fails here (or, for Limits and TmpLimits, fails to compile).
func TestSpecOfCarriesEveryField(t *testing.T) {
	pub := sandboxcfg.Spec{
		Name: "src", Contain: true, Mode: sandboxcfg.ModeCgroup, HostPID: true, Require: true,
		Confine: &sandboxcfg.Confinement{Read: []string{"/r"}, Write: []string{"/w"}, Network: true,
			Tmp: sandboxcfg.TmpLimits{Bytes: 1, Files: 2}},
		Limits: sandboxcfg.Limits{MemoryBytes: 3, Processes: 4, OpenFiles: 5, CPUs: 0.5},
	}
	got := sandbox.SpecOf(pub)
	for _, v := range []reflect.Value{reflect.ValueOf(got), reflect.ValueOf(*got.Confine), reflect.ValueOf(got.Limits), reflect.ValueOf(got.Confine.Tmp)} {
		for i := range v.NumField() {
			if v.Field(i).IsZero() {
				t.Errorf("SpecOf left %s.%s zero: it does not carry that field of sandbox.Spec", v.Type().Name(), v.Type().Field(i).Name)
			}
		}
	}
	if got.Mode != sandbox.ModeCgroup || got.Confine.Read[0] != "/r" || got.Limits.OpenFiles != 5 {
		t.Errorf("SpecOf(%+v) = %+v", pub, got)
	}
	if sandbox.SpecOf(sandboxcfg.Spec{}).Confine != nil {
		t.Error("SpecOf of an unconfined Spec confines it")
	}
}
