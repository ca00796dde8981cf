// Command toolhost lists and calls the tools of a Location, serves them to session
// runners and MCP clients, and manages a Location's plugins; see internal/cli.
//
//	go install github.com/toolhost/toolhost/cmd/toolhost@latest
package main

import "github.com/toolhost/toolhost/internal/cli"

func main() { cli.Main() }
