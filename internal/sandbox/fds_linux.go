package sandbox

import "golang.org/x/sys/unix"

// init marks every descriptor this process inherited above the standard three
// close-on-exec (one close_range), before anything else of the host runs: no
// process the host starts, contained or not, gets a descriptor the host's own
// parent leaked to it (a file, a socket). The host keeps them.
func init() {
	_ = unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
}
