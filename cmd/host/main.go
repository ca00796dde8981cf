// Command host is the toolhost command under its former package path, kept so that
// existing build scripts still work; cmd/toolhost is the same program and installs
// as toolhost (not host, the name of the DNS lookup utility). See internal/cli.
package main

import "github.com/toolhost/toolhost/internal/cli"

func main() { cli.Main() }
