// Command mcpserver is the telemetry tests' MCP server (go-sdk, stdio). Its tool
// "meta" returns the traceparent of the tools/call request's _meta as its text
// ("" when there is none).
package main

import (
	"context"
	"log"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	s := mcp.NewServer(&mcp.Implementation{Name: "meta", Version: "1.0.0"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "meta", Description: "Returns the traceparent the call carried in _meta."},
		func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			tp, _ := req.Params.GetMeta()["traceparent"].(string)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: tp}}}, nil, nil
		})
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		log.Fatal(err)
	}
}
