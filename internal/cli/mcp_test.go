package cli_test

import (
	"bufio"
	"encoding/json"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolhost/toolhost/internal/cli"
	"github.com/toolhost/toolhost/location"
)

// TestMCPAnswersInitializeBeforeReadingTheLocation serves a Location whose config
// is invalid over stdio: the client's initialize is answered all the same (the
// Location is read only once the answer is written), and then the run ends with
// the config's problem on stderr, naming the file and the pointer.
func TestMCPAnswersInitializeBeforeReadingTheLocation(t *testing.T) {
	invalid := workspace(t, `{"plugins": [{"name": "x"}]}`)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	stderr := &watchWriter{}
	done := make(chan int, 1)
	go func() {
		done <- cli.Run(t.Context(), []string{"mcp", "--location", invalid}, inR, outW, stderr)
		outW.Close()
	}()
	defer inW.Close()
	go io.WriteString(inW, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`+"\n")

	line, err := bufio.NewReader(outR).ReadString('\n')
	if err != nil {
		t.Fatalf("no answer to initialize: %v\nstderr:\n%s", err, stderr.String())
	}
	var answer struct {
		ID     int `json:"id"`
		Result struct {
			ServerInfo struct{ Name string } `json:"serverInfo"`
		} `json:"result"`
		Error any `json:"error"`
	}
	if err := json.Unmarshal([]byte(line), &answer); err != nil || answer.ID != 1 || answer.Error != nil || answer.Result.ServerInfo.Name != "toolhost" {
		t.Fatalf("the first line on stdout is not initialize's result: %s (%v)", line, err)
	}
	go io.Copy(io.Discard, outR)
	if code := <-done; code != cli.ExitFailure {
		t.Errorf("exit status %d, want %d (the Location cannot be activated)", code, cli.ExitFailure)
	}
	for _, s := range []string{filepath.Join(invalid, location.ConfigPath), "/plugins/0"} {
		if !strings.Contains(stderr.String(), s) {
			t.Errorf("stderr does not name %q:\n%s", s, stderr.String())
		}
	}
}
