package main

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// holdMemory takes mib MiB of memory in each of the ways that are not its data
// segment (RLIMIT_DATA counts private writable mappings only), touches every page,
// lets it go, and reports each: "held N MiB" or "denied: ...". The ways: a memfd,
// a shared anonymous mapping, a shared mapping of /dev/zero, and System V shared
// memory.
func holdMemory(mib int) map[string]string {
	r := map[string]string{}
	size := mib << 20
	touch := func(b []byte) {
		for i := 0; i < len(b); i += os.Getpagesize() {
			b[i] = 1
		}
	}
	try := func(what string, take func() ([]byte, func(), error)) {
		b, release, err := take()
		if err != nil {
			r[what] = "denied: " + err.Error()
			return
		}
		touch(b)
		r[what] = fmt.Sprintf("held %d MiB", len(b)>>20)
		release()
	}
	try("memfd", func() ([]byte, func(), error) {
		fd, err := unix.MemfdCreate("hostile", 0)
		if err != nil {
			return nil, nil, err
		}
		if err := unix.Ftruncate(fd, int64(size)); err != nil {
			unix.Close(fd)
			return nil, nil, err
		}
		b, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			unix.Close(fd)
			return nil, nil, err
		}
		return b, func() { unix.Munmap(b); unix.Close(fd) }, nil
	})
	try("shared anonymous mapping", func() ([]byte, func(), error) {
		b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANON)
		if err != nil {
			return nil, nil, err
		}
		return b, func() { unix.Munmap(b) }, nil
	})
	try("shared mapping of /dev/zero", func() ([]byte, func(), error) {
		f, err := os.OpenFile("/dev/zero", os.O_RDWR, 0)
		if err != nil {
			return nil, nil, err
		}
		b, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			f.Close()
			return nil, nil, err
		}
		return b, func() { unix.Munmap(b); f.Close() }, nil
	})
	try("System V shared memory", func() ([]byte, func(), error) {
		id, err := unix.SysvShmGet(unix.IPC_PRIVATE, size, unix.IPC_CREAT|0o600)
		if err != nil {
			return nil, nil, err
		}
		b, err := unix.SysvShmAttach(id, 0, 0)
		if err != nil {
			unix.SysvShmCtl(id, unix.IPC_RMID, nil)
			return nil, nil, err
		}
		return b, func() { unix.SysvShmDetach(b); unix.SysvShmCtl(id, unix.IPC_RMID, nil) }, nil
	})
	return r
}

// holdSocketBuffers fills the buffers of unix socket pairs, as many pairs as its
// descriptors allow, until mib MiB are held or it runs out, and reports how much
// it held: kernel memory no RLIMIT counts. The pairs are closed before it returns.
func holdSocketBuffers(mib int) string {
	var fds []int
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	chunk := make([]byte, 64<<10)
	held := 0
	for held < mib<<20 {
		pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK, 0)
		if err != nil {
			return fmt.Sprintf("held %d MiB, then %v", held>>20, err)
		}
		fds = append(fds, pair[0], pair[1])
		for _, fd := range pair {
			for {
				n, err := unix.Write(fd, chunk)
				if err != nil || n <= 0 {
					break
				}
				held += n
			}
		}
	}
	return fmt.Sprintf("held %d MiB", held>>20)
}
