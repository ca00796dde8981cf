package telemetry

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/toolhost/toolhost/internal/disktest"
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

// TestAuditDiskFullLeavesNoTornLine fills the disk under an audit trail while lines
// are written: the lines that could not be written are lost (and said so), but no
// line is torn or glued to another, and writing resumes once space is back.
func TestAuditDiskFullLeavesNoTornLine(t *testing.T) {
	disktest.Run(t, 64<<10, func(t *testing.T, d *disktest.Disk) {
		dir := filepath.Join(d.Dir, "audit")
		a, err := openAudit(dir, 1<<20, 8)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		pad := strings.Repeat("p", 300) // a line crosses a page's end now and then
		a.write(map[string]string{"id": "first", "pad": pad})
		d.Fill(t)
		for i := range 40 {
			a.write(map[string]string{"id": fmt.Sprintf("full-%d", i), "pad": pad})
		}
		if !a.failed {
			t.Fatal("no write failed on a full disk")
		}
		d.Free(t)
		for i := range 5 {
			a.write(map[string]string{"id": fmt.Sprintf("after-%d", i), "pad": pad})
		}
		data, err := os.ReadFile(filepath.Join(dir, auditFile))
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for line := range strings.Lines(string(data)) {
			var l map[string]string
			if err := json.Unmarshal([]byte(line), &l); err != nil || !strings.HasSuffix(line, "\n") {
				t.Errorf("a torn line %.60q...: %v", line, err)
				continue
			}
			seen[l["id"]] = true
		}
		for _, id := range []string{"first", "after-0", "after-4"} {
			if !seen[id] {
				t.Errorf("line %s is missing", id)
			}
		}
	})
}

// BenchmarkAuditWrite appends settlement-sized lines to an audit trail (no
// rotation): the cost of one line, lock and write.
func BenchmarkAuditWrite(b *testing.B) {
	a, err := openAudit(b.TempDir(), 1<<40, 8)
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	line := map[string]string{"event": "settlement", "pad": strings.Repeat("p", 400)}
	for b.Loop() {
		a.write(line)
	}
}

// TestAuditRefusesPlantedLinks: the audit trail never appends through a link
// planted in place of its file, nor opens in a directory others may write (where
// one could be planted later); each is an error naming it.
func TestAuditRefusesPlantedLinks(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("links and modes are Unix's")
	}
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, dir, outside string)
		says  string
	}{
		{"LinkAsTheFile", func(t *testing.T, dir, outside string) {
			if err := os.Symlink(outside, filepath.Join(dir, auditFile)); err != nil {
				t.Fatal(err)
			}
		}, "symbolic link"},
		{"LinkAsTheLock", func(t *testing.T, dir, outside string) {
			if err := os.Symlink(outside, filepath.Join(dir, auditLock)); err != nil {
				t.Fatal(err)
			}
		}, "symbolic link"},
		{"DirectoryOthersMayWrite", func(t *testing.T, dir, outside string) {
			if err := os.Chmod(dir, 0o777); err != nil {
				t.Fatal(err)
			}
		}, "writable by others"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "audit")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			outside := filepath.Join(t.TempDir(), "profile")
			if err := os.WriteFile(outside, []byte("# someone's file\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			tc.plant(t, dir, outside)
			a, err := openAudit(dir, 1<<20, 8)
			if err == nil {
				a.write(map[string]string{"event": "settlement"})
				a.Close()
				t.Fatal("openAudit opened the trail")
			}
			if !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), dir) {
				t.Errorf("openAudit = %v; want an error naming %s saying %q", err, dir, tc.says)
			}
			t.Log(err)
			if data, _ := os.ReadFile(outside); string(data) != "# someone's file\n" {
				t.Errorf("the file outside now holds %q", data)
			}
		})
	}
}

// TestAuditEndsALineTornByAKilledWriter: a line a process was killed writing (its
// first half on disk, no newline) does not swallow the next process's first line.
func TestAuditEndsALineTornByAKilledWriter(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, auditFile), []byte(`{"id":"whole"}`+"\n"+`{"id":"to`), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := openAudit(dir, 1<<20, 8)
	if err != nil {
		t.Fatal(err)
	}
	a.write(map[string]string{"id": "next"})
	a.write(map[string]string{"id": "last"})
	a.Close()
	data, err := os.ReadFile(filepath.Join(dir, auditFile))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"id":"whole"}` + "\n" + `{"id":"to` + "\n" + `{"id":"next"}` + "\n" + `{"id":"last"}` + "\n"; string(data) != want {
		t.Errorf("the trail holds %q, want %q", data, want)
	}
}

// auditWriterEnv makes the test binary a toolhost process writing audit lines:
// "DIR|NAME|LINES" (see init).
const auditWriterEnv = "TELEMETRY_TEST_AUDIT_WRITER"

// sharedMaxBytes is the rotation size of TestAuditSharedByProcesses.
const sharedMaxBytes = 4 << 10

// init runs the audit writer before TestMain, which builds test programs a
// writer does not need: it appends LINES lines {"id": "NAME-i", ...} to the trail in
// DIR, rotated at sharedMaxBytes, printing each id once written, and exits.
func init() {
	v := os.Getenv(auditWriterEnv)
	if v == "" {
		return
	}
	parts := strings.Split(v, "|")
	n, _ := strconv.Atoi(parts[2])
	a, err := openAudit(parts[0], sharedMaxBytes, 1000)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for i := range n {
		id := fmt.Sprintf("%s-%d", parts[1], i)
		a.write(map[string]string{"id": id, "pad": strings.Repeat("p", 100)})
		fmt.Println(id)
	}
	a.Close()
	os.Exit(0)
}

// TestAuditSharedByProcesses has three toolhost processes append to one audit
// trail past its rotation size many times over, and kills one (SIGKILL) part way,
// holding the lock or not: the others finish (its lock died with it), every line
// is whole and in exactly one file, every line a live process wrote is there, and
// every rotated file was rotated once, at the size (never a second time, short).
func TestAuditSharedByProcesses(t *testing.T) {
	dir := t.TempDir()
	const lines = 300
	start := func(name string, n int) (*exec.Cmd, *bufio.Scanner) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s|%s|%d", auditWriterEnv, dir, name, n))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, bufio.NewScanner(out)
	}
	a, aOut := start("a", lines)
	b, bOut := start("b", lines)
	k, kOut := start("killed", 1<<30)
	written := map[string]bool{}
	for i := 0; i < 50 && kOut.Scan(); i++ {
		written[kOut.Text()] = true
	}
	k.Process.Kill()
	for kOut.Scan() {
		written[kOut.Text()] = true
	}
	k.Wait()
	for _, w := range []struct {
		cmd *exec.Cmd
		out *bufio.Scanner
	}{{a, aOut}, {b, bOut}} {
		for w.out.Scan() {
			written[w.out.Text()] = true
		}
		if err := w.cmd.Wait(); err != nil {
			t.Fatalf("a writer: %v", err)
		}
	}

	files, _ := filepath.Glob(filepath.Join(dir, "audit*.jsonl"))
	seen := map[string]int{}
	maxLine := 0
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(string(data)) {
			var l map[string]string
			if err := json.Unmarshal([]byte(line), &l); err != nil || !strings.HasSuffix(line, "\n") {
				t.Errorf("%s: a broken line %q", filepath.Base(name), line)
				continue
			}
			seen[l["id"]]++
			maxLine = max(maxLine, len(line))
		}
	}
	for id := range written {
		if seen[id] != 1 {
			t.Errorf("line %s found %d times", id, seen[id])
		}
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("line %s found %d times", id, n)
		}
	}
	for _, w := range []string{"a", "b"} {
		for i := range lines {
			if !written[fmt.Sprintf("%s-%d", w, i)] {
				t.Errorf("%s-%d was not written", w, i)
			}
		}
	}
	rotated := 0
	for _, name := range files {
		if filepath.Base(name) == auditFile {
			continue
		}
		rotated++
		st, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > sharedMaxBytes || st.Size() <= int64(sharedMaxBytes-maxLine) {
			t.Errorf("%s was rotated at %d bytes; want it full, within a line of %d", filepath.Base(name), st.Size(), sharedMaxBytes)
		}
	}
	if rotated < 10 {
		t.Errorf("%d rotations, want many", rotated)
	}
}
