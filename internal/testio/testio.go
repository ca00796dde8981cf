// Package testio has what tests share to watch what a process or a logger writes.
package testio

import (
	"bytes"
	"strings"
	"sync"
)

// SyncBuffer is a bytes.Buffer that one side (a child process's output, a logger)
// may write while a test reads it. The zero value is ready to use.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Contains reports whether what was written so far contains s.
func (b *SyncBuffer) Contains(s string) bool { return strings.Contains(b.String(), s) }
