//go:build linux

package sandbox_test

import (
	"testing"

	"github.com/toolhost/toolhost/internal/sandbox"
)

// BenchmarkRun runs /bin/true to its exit under each sandbox, in turn per
// iteration; it reports each one's mean.
func BenchmarkRun(b *testing.B) {
	for _, tc := range []struct {
		name string
		spec sandbox.Spec
	}{
		{"none", sandbox.Spec{Mode: sandbox.ModeNone}},
		{"namespace", sandbox.Spec{Contain: true, Mode: sandbox.ModeNamespace}},
		{"subreaper", sandbox.Spec{Contain: true, Mode: sandbox.ModeSubreaper}},
		{"cgroup", sandbox.Spec{Contain: true, Mode: sandbox.ModeCgroup}},
		{"namespace+confined", sandbox.Spec{Contain: true, Mode: sandbox.ModeNamespace, Confine: &sandbox.Confinement{}}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				box, err := sandbox.Command(tc.spec, "/bin/true", []string{"true"}, "/", nil)
				if err != nil {
					b.Fatal(err)
				}
				if err := box.Start(); err != nil {
					b.Fatal(err)
				}
				if err := box.Wait(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
