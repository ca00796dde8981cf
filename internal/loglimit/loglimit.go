// Package loglimit bounds what one tool source can make the host log: each source
// logs through a Logger of its own, a token bucket of bytes, and what it holds
// back is counted and reported, not lost without a word.
package loglimit

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Defaults of New.
const (
	// DefaultRate is the bytes a source may log per second, over time.
	DefaultRate = 16 << 10
	// DefaultBurst is the bytes a source may log at once after a quiet spell.
	DefaultBurst = 256 << 10
	// MaxText is the longest message or string value of one line; the rest is cut,
	// saying how much.
	MaxText = 4 << 10
	// reportEvery is how often, while lines are held back, their count is logged.
	reportEvery = time.Second
)

// Logger logs one source's lines to an hclog.Logger while its budget lasts: a line
// costs the bytes of its message and string values, the budget refills at a rate
// up to a burst. A line over budget is held back and counted; while lines are held
// back, a warning says how many (and how many bytes) every second, and Close says
// the rest. Its methods are safe for concurrent use.
type Logger struct {
	log         hclog.Logger
	rate, burst float64

	mu     sync.Mutex
	tokens float64
	last   time.Time
	lines  int // held back since the last report
	bytes  int
	timer  *time.Timer // the next report, while lines are held back
	closed bool
}

// New returns a Logger logging to log at rate bytes a second with bursts of burst
// bytes (DefaultRate and DefaultBurst where not positive). Close it when the source
// is gone.
func New(log hclog.Logger, rate, burst int) *Logger {
	if rate <= 0 {
		rate = DefaultRate
	}
	if burst <= 0 {
		burst = DefaultBurst
	}
	return &Logger{log: log, rate: float64(rate), burst: float64(burst), tokens: float64(burst), last: time.Now()}
}

// Log logs msg with its key/value args at level if the budget allows, else counts
// it. A level the logger would not log costs nothing. Text longer than MaxText is
// cut.
func (l *Logger) Log(level hclog.Level, msg string, args ...any) {
	if lv := l.log.GetLevel(); lv != hclog.NoLevel && level < lv {
		return
	}
	msg = Cut(msg)
	cost := len(msg)
	for i, a := range args {
		s, ok := a.(string)
		if !ok {
			cost += 8
			continue
		}
		if c := Cut(s); len(c) != len(s) {
			args = slices.Clone(args) // the caller's
			args[i], s = c, c
		}
		cost += len(s)
	}
	if !l.take(cost) {
		return
	}
	l.log.Log(level, msg, args...)
}

// take spends cost from the budget, or counts a line held back.
func (l *Logger) take(cost int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	l.tokens = min(l.burst, l.tokens+now.Sub(l.last).Seconds()*l.rate)
	l.last = now
	if l.tokens >= float64(cost) && !l.closed {
		l.tokens -= float64(cost)
		return true
	}
	l.lines++
	l.bytes += cost
	if l.timer == nil && !l.closed {
		l.timer = time.AfterFunc(reportEvery, l.report)
	}
	return false
}

// report logs how many lines were held back since the last report.
func (l *Logger) report() {
	l.mu.Lock()
	lines, bytes := l.lines, l.bytes
	l.lines, l.bytes, l.timer = 0, 0, nil
	l.mu.Unlock()
	if lines > 0 {
		l.log.Warn("log lines held back: the source logs faster than it may", "lines", lines, "bytes", bytes)
	}
}

// Close reports what is held back and stops the reports; lines logged afterwards
// are only counted. Idempotent.
func (l *Logger) Close() {
	l.mu.Lock()
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	l.closed = true
	l.mu.Unlock()
	l.report()
}

// Cut returns s cut to MaxText bytes (at a character boundary), saying how many
// bytes were cut.
func Cut(s string) string {
	if len(s) <= MaxText {
		return s
	}
	n := MaxText
	for n > 0 && s[n]&0xc0 == 0x80 {
		n--
	}
	return s[:n] + fmt.Sprintf("… (%d bytes cut)", len(s)-n)
}
