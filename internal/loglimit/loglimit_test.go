package loglimit_test

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/toolhost/toolhost/internal/loglimit"
)

type lines struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A flood is logged up to the burst, then at the rate; every line is either
// logged or counted in a report.
func TestAFloodIsHeldBackAndCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		out := &lines{}
		log := hclog.New(&hclog.LoggerOptions{Output: out, Level: hclog.Info, JSONFormat: true})
		l := loglimit.New(log, 1000, 10_000)
		line := strings.Repeat("x", 100)
		const total = 1000
		for i := range total {
			l.Log(hclog.Info, line, "i", i)
			if i%100 == 99 {
				time.Sleep(time.Second) // a second's refill: 1000 bytes, 9 lines
				synctest.Wait()
			}
		}
		l.Close()
		logged, reported := 0, 0
		for _, ln := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			switch {
			case strings.Contains(ln, line):
				logged++
			case strings.Contains(ln, "log lines held back"):
				var n int
				if i := strings.Index(ln, `"lines":`); i >= 0 {
					for _, c := range ln[i+len(`"lines":`):] {
						if c < '0' || c > '9' {
							break
						}
						n = n*10 + int(c-'0')
					}
				}
				reported += n
			}
		}
		// The burst holds 10,000 bytes (92 lines of 108), each second adds 9 more.
		if logged > 92+9*10 || logged < 92 {
			t.Errorf("%d lines logged; want the burst and the rate's", logged)
		}
		if logged+reported != total {
			t.Errorf("%d logged and %d reported held back, of %d: some lost without a word", logged, reported, total)
		}
	})
}

func TestLevelsNotLoggedCostNothing(t *testing.T) {
	out := &lines{}
	l := loglimit.New(hclog.New(&hclog.LoggerOptions{Output: out, Level: hclog.Warn}), 1, 100)
	for range 1000 {
		l.Log(hclog.Debug, strings.Repeat("d", 50))
	}
	l.Log(hclog.Warn, "still logged")
	l.Close()
	if s := out.String(); !strings.Contains(s, "still logged") || strings.Contains(s, "held back") {
		t.Errorf("log: %q", s)
	}
}

func TestCut(t *testing.T) {
	long := strings.Repeat("é", loglimit.MaxText)
	got := loglimit.Cut(long)
	if len(got) > loglimit.MaxText+40 || !strings.HasSuffix(got, "bytes cut)") || !strings.HasPrefix(got, "éé") {
		t.Errorf("Cut: %d bytes, ending %q", len(got), got[len(got)-30:])
	}
	if strings.ContainsRune(got, '\uFFFD') {
		t.Error("Cut split a character")
	}
}
