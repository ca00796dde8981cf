//go:build !unix

package fsys_test

import "errors"

func mkfifo(string) error { return errors.ErrUnsupported }
