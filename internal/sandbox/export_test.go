package sandbox

// DisableLandlock makes the package behave as on a kernel without Landlock until
// the returned function is called.
func DisableLandlock() (restore func()) {
	landlockDisabled = true
	return func() { landlockDisabled = false }
}
