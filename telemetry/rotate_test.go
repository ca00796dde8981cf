package telemetry

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// TestRotationSharedByWriters has two audit logs on one directory, as two toolhost
// processes have, write past the rotation size many times over: every line is
// kept whole in exactly one file, every file is mode 0600, and no more rotated
// files remain than are kept.
func TestRotationSharedByWriters(t *testing.T) {
	dir := t.TempDir()
	const writers, lines, keep = 2, 400, 1000
	var logs [writers]*auditLog
	for i := range logs {
		a, err := openAudit(dir, 4<<10, keep)
		if err != nil {
			t.Fatal(err)
		}
		logs[i] = a
	}
	var wg sync.WaitGroup
	for w, a := range logs {
		wg.Go(func() {
			for i := range lines {
				a.write(map[string]string{"id": fmt.Sprintf("%d-%d", w, i)})
			}
		})
	}
	wg.Wait()
	for _, a := range logs {
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
	}

	files, _ := filepath.Glob(filepath.Join(dir, "audit*.jsonl"))
	if len(files) < 2 {
		t.Fatalf("no rotation happened: %v", files)
	}
	seen := map[string]int{}
	for _, name := range files {
		st, err := os.Stat(name)
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, mode %v", name, err, st.Mode().Perm())
		}
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var l map[string]string
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Errorf("%s: a broken line %q", name, sc.Text())
			}
			seen[l["id"]]++
		}
		f.Close()
	}
	for w := range writers {
		for i := range lines {
			if n := seen[fmt.Sprintf("%d-%d", w, i)]; n != 1 {
				t.Errorf("line %d-%d found %d times", w, i, n)
			}
		}
	}

	// Rotated files beyond keep are removed.
	a, err := openAudit(dir, 64, 2)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		a.write(map[string]int{"n": i})
	}
	a.Close()
	old, _ := filepath.Glob(filepath.Join(dir, "audit-*.jsonl"))
	if len(old) != 2 {
		t.Errorf("%d rotated files kept, want 2", len(old))
	}
}
