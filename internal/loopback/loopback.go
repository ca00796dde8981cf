// Package loopback tells whether what an HTTP request names is this machine's
// loopback interface. An endpoint that listens on loopback only is still reachable
// from a web page the user opens: the page's host name may resolve to 127.0.0.1
// (DNS rebinding) or the page may post to http://127.0.0.1:PORT itself. Such a
// request carries the page's host name in Host, or the page's origin in Origin;
// checking both keeps the endpoint to local programs.
package loopback

import (
	"net"
	"net/url"
	"strings"
)

// Host reports whether a Host header (host or host:port) names loopback:
// localhost, or a loopback IP address.
func Host(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Origin reports whether an Origin header is an http or https origin on loopback.
func Origin(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	return Host(u.Host)
}
