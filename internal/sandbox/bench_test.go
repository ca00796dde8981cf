//go:build linux

package sandbox_test

import (
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

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

// BenchmarkWorldAlternating runs /bin/true to its exit in turn: bare (os/exec), in
// a toolhost world (a confined box), confined without a world (the fallback:
// Landlock and seccomp), and under bubblewrap with the same minimal root, the same
// namespaces and no capability (skipped where bwrap is missing). It reports each
// one's median, and the ratio of toolhost's added cost (over bare) to
// bubblewrap's.
func BenchmarkWorldAlternating(b *testing.B) {
	if ok, why := sandbox.WorldAvailable(); !ok {
		b.Skip("no world here: " + why)
	}
	bwrap, _ := exec.LookPath("bwrap")
	bwrapArgs := sandbox.BwrapArgs("/bin/true")
	run := func(spec sandbox.Spec) {
		box, err := sandbox.Command(spec, "/bin/true", []string{"true"}, "/", nil)
		if err == nil {
			err = box.Start()
		}
		if err == nil {
			err = box.Wait()
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	confined := sandbox.Spec{Name: "true", Confine: &sandbox.Confinement{}}
	var bare, world, fallback, bw []time.Duration
	timed := func(into *[]time.Duration, f func()) {
		start := time.Now()
		f()
		*into = append(*into, time.Since(start))
	}
	for b.Loop() {
		timed(&bare, func() {
			if err := exec.Command("/bin/true").Run(); err != nil {
				b.Fatal(err)
			}
		})
		timed(&world, func() { run(confined) })
		os.Setenv(sandbox.OffEnv, "world")
		timed(&fallback, func() { run(confined) })
		os.Unsetenv(sandbox.OffEnv)
		if bwrap != "" {
			timed(&bw, func() {
				if out, err := exec.Command(bwrap, bwrapArgs...).CombinedOutput(); err != nil {
					b.Fatalf("bwrap: %v: %s", err, out)
				}
			})
		}
	}
	med := func(ds []time.Duration) time.Duration {
		if len(ds) == 0 {
			return 0
		}
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	mb, mw, mf, mbw := med(bare), med(world), med(fallback), med(bw)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(mb), "bare-ms")
	b.ReportMetric(ms(mw), "world-ms")
	b.ReportMetric(ms(mf), "fallback-ms")
	if bwrap != "" {
		b.ReportMetric(ms(mbw), "bwrap-ms")
		b.ReportMetric(float64(mw-mb)/float64(mbw-mb), "world-added/bwrap-added")
	}
}
