package location_test

import (
	"strings"
	"testing"

	"github.com/toolhost/toolhost/location"
)

// Sources whose names differ only by letter case are one name: the second is
// refused as a duplicate, as the same name is.
func TestSourceNamesDifferingOnlyByCaseAreDuplicates(t *testing.T) {
	for _, tt := range []struct{ name, doc, at string }{
		{"Plugins", `{"plugins": [{"name": "text", "path": "p"}, {"name": "Text", "path": "q"}]}`, "/plugins/1/name"},
		{"PluginAndMCPServer", `{"plugins": [{"name": "git", "path": "p"}], "mcp_servers": [{"name": "GIT", "command": "m"}]}`, "/mcp_servers/0/name"},
		{"ManifestTools", `{"tools": [{"name": "shout", "description": "d", "command": ["x"]}, {"name": "Shout", "description": "d", "command": ["y"]}]}`, "/tools/1/name"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := location.ParseConfig(t.TempDir(), "config.json", []byte(tt.doc))
			if err == nil || !strings.Contains(err.Error(), tt.at) || !strings.Contains(err.Error(), "only by letter case") {
				t.Fatalf("err = %v; want a duplicate name at %s", err, tt.at)
			}
		})
	}
}
