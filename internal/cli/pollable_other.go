//go:build !unix

package cli

import "os"

// pollable returns nil: standard input is read as it is (see pollable_unix.go).
func pollable(*os.File) (pf *os.File, restore func()) { return nil, nil }
