package server

import (
	"bufio"
	"encoding/hex"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/toolhost/toolhost/internal/sandbox"
)

// sourceCheckListener closes every TCP connection whose client belongs to a tool
// source's process tree (see sandbox.SourceOf): at accept, the client's socket is
// found in /proc/net/tcp{,6} (its local address is the connection's remote one)
// and its inode in the processes' descriptors. A client in another network
// namespace (a confined source without network) cannot reach the loopback
// listener at all.
type sourceCheckListener struct {
	net.Listener
	logger hclog.Logger
}

func (l *sourceCheckListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		local, _ := c.LocalAddr().(*net.TCPAddr)
		remote, _ := c.RemoteAddr().(*net.TCPAddr)
		if local == nil || remote == nil {
			return c, nil
		}
		source, pid, ok := tcpSource(remote, local)
		if !ok {
			return c, nil
		}
		l.logger.Warn("refused a connection from a tool source's process", "source", source, "peer_pid", pid, "peer", remote.String())
		c.Close()
	}
}

// tcpSource finds the processes holding the TCP socket whose local address is
// client and remote address server, and reports the first that belongs to a tool
// source.
func tcpSource(client, server *net.TCPAddr) (source string, pid int, ok bool) {
	inode := tcpInode(client, server)
	if inode == "" {
		return "", 0, false
	}
	target := "socket:[" + inode + "]"
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		fds, _ := os.ReadDir("/proc/" + p.Name() + "/fd")
		for _, fd := range fds {
			if link, _ := os.Readlink("/proc/" + p.Name() + "/fd/" + fd.Name()); link == target {
				if name, in := sandbox.SourceOf(pid); in {
					return name, pid, true
				}
			}
		}
	}
	return "", 0, false
}

// tcpInode returns the inode of the socket local→remote in /proc/net/tcp or tcp6
// ("" if none).
func tcpInode(local, remote *net.TCPAddr) string {
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(file)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 {
				continue
			}
			if procAddrIs(fields[1], local) && procAddrIs(fields[2], remote) {
				f.Close()
				return fields[9]
			}
		}
		f.Close()
	}
	return ""
}

// procAddrIs reports whether a /proc/net/tcp address ("0100007F:1F90": the IP in
// 32-bit words of host byte order, the port big-endian) is a.
func procAddrIs(s string, a *net.TCPAddr) bool {
	ipHex, portHex, ok := strings.Cut(s, ":")
	if !ok {
		return false
	}
	port, err := strconv.ParseUint(portHex, 16, 16)
	if err != nil || int(port) != a.Port {
		return false
	}
	raw, err := hex.DecodeString(ipHex)
	if err != nil || len(raw)%4 != 0 {
		return false
	}
	for i := 0; i < len(raw); i += 4 { // each word is little-endian (amd64, arm64)
		raw[i], raw[i+1], raw[i+2], raw[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	ip := net.IP(raw)
	return ip.Equal(a.IP)
}
