// Command nativeecho is the baseline of the mcpserve benchmark: the probe plugin's
// echo written as a native go-sdk stdio MCP server, what an author would otherwise
// write.
package main

import (
	"context"
	"log"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type In struct {
	Text string `json:"text"`
}

func main() {
	// The protocol versions toolhost mcp speaks, so both sides of the benchmark
	// negotiate the same one.
	s := mcp.NewServer(&mcp.Implementation{Name: "nativeecho", Version: "1"}, &mcp.ServerOptions{
		SupportedProtocolVersions: []string{"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"},
	})
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Returns its text."}, func(_ context.Context, _ *mcp.CallToolRequest, in In) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
	})
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		log.Fatal(err)
	}
}
