// Command nativeecho is the baseline of the mcpserve benchmark: what an author would
// otherwise write as a native go-sdk stdio MCP server. Its echo is the probe
// plugin's echo; its read is the built-in read's counterpart (a small text file of
// the working directory, numbered like cat -n, as text and structured output).
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type In struct {
	Text string `json:"text"`
}

type ReadIn struct {
	Path string `json:"path"`
}

type ReadOut struct {
	Path       string `json:"path"`
	Content    string `json:"content"`
	StartLine  int    `json:"start_line"`
	EndLine    int    `json:"end_line"`
	TotalLines int    `json:"total_lines"`
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
	mcp.AddTool(s, &mcp.Tool{Name: "read", Description: "Reads a text file."}, func(_ context.Context, _ *mcp.CallToolRequest, in ReadIn) (*mcp.CallToolResult, ReadOut, error) {
		rel := filepath.Clean(in.Path)
		if !filepath.IsLocal(rel) {
			return nil, ReadOut{}, fmt.Errorf("%q is outside the directory", in.Path)
		}
		data, err := os.ReadFile(rel)
		if err != nil {
			return nil, ReadOut{}, err
		}
		lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
		var sb strings.Builder
		for i, l := range lines {
			if i > 0 {
				sb.WriteByte('\n')
			}
			fmt.Fprintf(&sb, "%6d\t%s", i+1, l)
		}
		out := ReadOut{Path: rel, Content: sb.String(), StartLine: 1, EndLine: len(lines), TotalLines: len(lines)}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: out.Content}}}, out, nil
	})
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		log.Fatal(err)
	}
}
