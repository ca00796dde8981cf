//go:build linux

package sandbox

// DisableLandlock makes the package behave as on a kernel without Landlock until
// the returned function is called.
func DisableLandlock() (restore func()) {
	landlockDisabled = true
	return func() { landlockDisabled = false }
}

// DisableThreadStart makes confined programs start under the launcher, as outside
// ModeNamespace, until the returned function is called.
func DisableThreadStart() (restore func()) {
	threadStartDisabled = true
	return func() { threadStartDisabled = false }
}

// ThreadStart reports whether confined programs start from a confined thread here.
func ThreadStart() bool { return threadStart() }
