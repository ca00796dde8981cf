//go:build !linux

package disktest

import "testing"

func runChild(t *testing.T) {
	t.Skip("disktest: a small file system of the test's own needs Linux mount namespaces")
}

func mount(t *testing.T, _ int64) *Disk {
	t.Skip("disktest: a small file system of the test's own needs Linux mount namespaces")
	return nil
}
