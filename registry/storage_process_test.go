package registry

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/toolhost/toolhost/sdk"
)

// The helper processes of these tests: the test binary run with registryHelper set
// to what it is to do and registryDir to the storage directory.
const (
	registryHelper = "REGISTRY_TEST_HELPER"
	registryDir    = "REGISTRY_TEST_DIR"
)

// runHelper runs the helper process registryHelper names, if any, and exits.
func runHelper() {
	var err error
	switch os.Getenv(registryHelper) {
	case "":
		return
	case "stuck":
		err = helperStuckRetention(os.Getenv(registryDir))
	case "quota":
		err = helperQuota(os.Getenv(registryDir))
	default:
		err = fmt.Errorf("unknown helper %q", os.Getenv(registryHelper))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// stuckWriter writes 4 MiB, says so on stdout, then never finishes.
type stuckWriter struct{}

func (stuckWriter) WriteTo(w io.Writer) (int64, error) {
	chunk := []byte(strings.Repeat("x", 64<<10))
	var n int64
	for range 64 {
		m, err := w.Write(chunk)
		n += int64(m)
		if err != nil {
			return n, err
		}
	}
	fmt.Println("mid-write")
	select {}
}

// helperStuckRetention is a host stopped in the middle of retaining an output.
func helperStuckRetention(dir string) error {
	st, err := OpenStorage(dir, StorageOptions{})
	if err != nil {
		return err
	}
	_, err = st.retain(stuckWriter{})
	return err
}

// quotaOutput is what the quota helpers' tool returns: 110,000 bytes, retained.
var quotaOutput = strings.Repeat("0123456789\n", 10_000)

// helperQuota is a host settling calls whose outputs are retained, 4 in a row, in
// Location /ws with a quota of 700,000 bytes.
func helperQuota(dir string) error {
	st, err := OpenStorage(dir, StorageOptions{})
	if err != nil {
		return err
	}
	r, err := New(Options{Storage: st})
	if err != nil {
		return err
	}
	release, err := r.OpenLocation("/ws", Limits{MaxRetainedBytes: 700_000})
	if err != nil {
		return err
	}
	defer release()
	unregister, err := r.Register(Batch{Location: "/ws", Source: Source{Kind: "plugin", Name: "big"}, Tools: map[string]sdk.Tool{
		"big": sdk.NewTool("big", func(context.Context, sdk.Invocation, struct{}) (string, error) { return quotaOutput, nil }),
	}})
	if err != nil {
		return err
	}
	defer unregister()
	for i := range 4 {
		q, err := r.Prepare("/ws")
		if err != nil {
			return err
		}
		_, err = q.Settle(context.Background(), Call{Name: "big", Invocation: sdk.Invocation{ToolCallID: fmt.Sprint("c", i)}})
		if err != nil && !errors.Is(err, ErrQuotaExceeded) {
			return err
		}
	}
	return nil
}

func helper(t *testing.T, what, dir string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), registryHelper+"="+what, registryDir+"="+dir)
	cmd.Stderr = os.Stderr
	return cmd
}

// TestRetentionKilledMidWriteLeavesNoPartialFile kills a host while it writes an
// output to managed storage: no managed name holds a partial output, and the next
// start removes the temporary file and says so.
func TestRetentionKilledMidWriteLeavesNoPartialFile(t *testing.T) {
	dir := t.TempDir()
	cmd := helper(t, "stuck", dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	cmd.Process.Kill()
	cmd.Wait()
	if line != "mid-write\n" {
		t.Fatalf("the host said %q, want it in the middle of writing", line)
	}
	checkNoPartial := func(when string) {
		t.Helper()
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if isManagedName(e.Name()) {
				t.Errorf("%s: %s holds a partial output under a managed name", when, e.Name())
			}
		}
	}
	checkNoPartial("after the kill")

	var log strings.Builder
	var mu sync.Mutex
	logger := hclog.New(&hclog.LoggerOptions{Output: &lockedWriter{w: &log, mu: &mu}})
	if _, err := OpenStorage(dir, StorageOptions{Logger: logger}); err != nil {
		t.Fatal(err)
	}
	checkNoPartial("after the next start")
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".partial") {
			t.Errorf("the next start left the temporary file %s", e.Name())
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(log.String(), "removed a partial output file") {
		t.Errorf("the next start logged %q; want it to say it removed the partial file", log.String())
	}
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestQuotaIsOnePerLocationAcrossProcesses has five hosts retain outputs for one
// Location at once: together they stay within its one quota.
func TestQuotaIsOnePerLocationAcrossProcesses(t *testing.T) {
	dir := t.TempDir()
	if _, err := OpenStorage(dir, StorageOptions{}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 5 {
		cmd := helper(t, "quota", dir)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			if err := cmd.Wait(); err != nil {
				t.Errorf("host %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	var total int64
	files := 0
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if isManagedName(e.Name()) {
			total += info.Size()
			files++
		} else if strings.HasPrefix(e.Name(), ".") && strings.HasSuffix(e.Name(), ".partial") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
	t.Logf("five hosts retained %d files, %d bytes, against a quota of 700000", files, total)
	if total > 700_000 {
		t.Errorf("the hosts retained %d bytes for one Location, over its quota of 700000", total)
	}
	// A retention in progress reserves at most 1/64 of the quota beyond what it
	// wrote, so at most one output fewer than the quota holds can be refused.
	if files < 5 {
		t.Errorf("%d files retained, want at least 5 of the 6 the quota holds", files)
	}
}
