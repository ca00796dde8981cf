//go:build !linux

package cli_test

import (
	"os"
	"testing"
)

// openPTY skips the test: terminal_test.go opens Linux's /dev/ptmx.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Skip("the pseudo-terminal tests open Linux's /dev/ptmx")
	return nil, nil
}
