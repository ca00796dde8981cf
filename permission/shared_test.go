package permission_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/toolhost/toolhost/permission"
)

// saverEnv makes the test binary a host saving approvals (see runSaver).
const saverEnv = "PERMISSION_TEST_SAVER"

// runSaver is a host process: it saves "always" approvals for the actions
// PREFIX-0 … PREFIX-(N-1) to STATE, answering its own asks, given as
// "STATE|PREFIX|N" in saverEnv, and prints each action once its approval is
// saved.
func runSaver() {
	parts := strings.Split(os.Getenv(saverEnv), "|")
	n, _ := strconv.Atoi(parts[2])
	s, err := permission.New(permission.Options{StateFile: parts[0], Asker: &answerAsker{ans: permission.Answer{Reply: permission.Always}}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for i := range n {
		r := req("s", fmt.Sprintf("%s-%d", parts[1], i), "x")
		r.Save = []string{"*"}
		if err := s.Assert(context.Background(), r); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(r.Action) // saved: the host has said so
	}
	s.Close()
	os.Exit(0)
}

// saver starts a host process saving n approvals with prefix to state.
func saver(t *testing.T, state, prefix string, n int) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s|%s|%d", saverEnv, state, prefix, n))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

func savedActions(t *testing.T, state string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Approvals []struct{ Action string } `json:"approvals"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("state file: %v", err)
	}
	got := map[string]bool{}
	for _, a := range doc.Approvals {
		got[a.Action] = true
	}
	return got
}

// TestHostsSavingApprovalsConcurrentlyLoseNone has three host processes save 100
// approvals each to one state file at once: all 300 are kept.
func TestHostsSavingApprovalsConcurrentlyLoseNone(t *testing.T) {
	state := filepath.Join(t.TempDir(), "approvals.json")
	const hosts, each = 3, 100
	var wg sync.WaitGroup
	for h := range hosts {
		cmd := saver(t, state, fmt.Sprint("h", h), each)
		wg.Go(func() {
			if err := cmd.Wait(); err != nil {
				t.Errorf("host %d: %v", h, err)
			}
		})
	}
	wg.Wait()
	got := savedActions(t, state)
	if len(got) != hosts*each {
		t.Errorf("the state file holds %d approvals, want %d", len(got), hosts*each)
	}
	entries, _ := os.ReadDir(filepath.Dir(state))
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".tmp") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
}

// TestApprovalSavedByAnotherHostIsKeptAndSeen: a host that loaded the approvals
// before another host saved one neither wipes it with its own save nor asks for it
// again.
func TestApprovalSavedByAnotherHostIsKeptAndSeen(t *testing.T) {
	state := filepath.Join(t.TempDir(), "approvals.json")
	asker := &answerAsker{ans: permission.Answer{Reply: permission.Always}}
	s := newService(t, permission.Options{StateFile: state, Asker: asker})
	if err := saver(t, state, "other", 1).Wait(); err != nil {
		t.Fatal(err)
	}
	if got := s.Evaluate("other-0", []string{"x"}); got != permission.Allow {
		t.Errorf("an approval the other host saved evaluates to %q here, want allow", got)
	}
	if err := s.Assert(t.Context(), req("s", "other-0", "x")); err != nil || asker.count() != 0 {
		t.Errorf("Assert of the other host's approval: %v, %d asks; want allowed without asking", err, asker.count())
	}
	mine := req("s", "mine", "x")
	mine.Save = []string{"*"}
	if err := s.Assert(t.Context(), mine); err != nil {
		t.Fatal(err)
	}
	if got := savedActions(t, state); !got["other-0"] || !got["mine"] {
		t.Errorf("state file holds %v, want both hosts' approvals", got)
	}
}

// TestLeftoverTemporaryFileRemovedAtStart: a host killed while saving leaves a
// temporary file beside the state; the next start removes it.
func TestLeftoverTemporaryFileRemovedAtStart(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "approvals.json")
	leftover := filepath.Join(dir, ".approvals.json.123456.tmp")
	writeFile(t, leftover, `{"version": 1, "appro`)
	newService(t, permission.Options{StateFile: state})
	if _, err := os.Stat(leftover); !os.IsNotExist(err) {
		t.Errorf("leftover temporary file still there: %v", err)
	}
}

// TestHostKilledWhileSavingLosesNothingSaved kills a host process (SIGKILL) in
// the middle of saving approvals one after another, so mid-write, holding the
// lock or between the write and the rename, again and again: after each kill the
// next host starts at once over a valid file (the dead one's lock is free) that
// holds every approval the dead one said it saved, and no temporary file.
func TestHostKilledWhileSavingLosesNothingSaved(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "approvals.json")
	saved := map[string]bool{}
	for round := range 5 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s|round%d|100000", saverEnv, state, round))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		for i := 0; i < 20+round*7 && sc.Scan(); i++ {
			saved[sc.Text()] = true
		}
		cmd.Process.Kill() // while it saves the next
		for sc.Scan() {    // said before it died
			saved[sc.Text()] = true
		}
		cmd.Wait()

		s, err := permission.New(permission.Options{StateFile: state})
		if err != nil {
			t.Fatalf("round %d: the next host: %v", round, err)
		}
		for action := range saved {
			if got := s.Evaluate(action, []string{"x"}); got != permission.Allow {
				t.Errorf("round %d: %s, saved before the kill, evaluates as %q", round, action, got)
			}
		}
		s.Close()
		if tmp, _ := filepath.Glob(filepath.Join(dir, ".*.tmp")); len(tmp) > 0 {
			t.Errorf("round %d: temporary files left: %v", round, tmp)
		}
	}
	if len(saved) < 5*20 {
		t.Errorf("only %d approvals saved in all", len(saved))
	}
}
