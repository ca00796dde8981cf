package registry

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/toolhost/toolhost/sdk"
)

// openBoundStorage opens a Storage in a fresh temporary directory.
func openBoundStorage(t testing.TB) *Storage {
	t.Helper()
	st, err := OpenStorage(t.TempDir(), StorageOptions{})
	if err != nil {
		t.Fatalf("OpenStorage: %v", err)
	}
	return st
}

// numberedLines returns n lines "line 1\n" ... "line n\n".
func numberedLines(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		b.WriteString("line " + strconv.Itoa(i) + "\n")
	}
	return b.String()
}

// checkPreview asserts everything a preview of full, retained at path, must satisfy
// and returns its head and tail.
func checkPreview(t *testing.T, lim Limits, full, preview, path string) (head, tail string) {
	t.Helper()
	lim = lim.WithDefaults()
	if len(preview) > lim.MaxBytes {
		t.Errorf("preview is %d bytes, over the limit %d", len(preview), lim.MaxBytes)
	}
	if n := lineCount(preview); n > lim.MaxLines {
		t.Errorf("preview is %d lines, over the limit %d", n, lim.MaxLines)
	}
	if utf8.ValidString(full) && !utf8.ValidString(preview) {
		t.Errorf("preview of valid UTF-8 is not valid UTF-8: %q", preview)
	}
	head, tail, ok := strings.Cut(preview, truncationMarker(path, lineCount(full), len(full)))
	if !ok {
		t.Fatalf("preview lacks the marker naming %s, %d lines, %d bytes:\n%s", path, lineCount(full), len(full), preview)
	}
	if !strings.HasPrefix(full, head) {
		t.Errorf("head %q is not a prefix of the output", head)
	}
	if !strings.HasSuffix(full, tail) {
		t.Errorf("tail %q is not a suffix of the output", tail)
	}
	if len(head)+len(tail) >= len(full) {
		t.Errorf("head (%d bytes) and tail (%d bytes) cover the whole output (%d bytes)", len(head), len(tail), len(full))
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading retained output: %v", err)
	}
	if string(got) != full {
		t.Errorf("retained file holds %d bytes, want the complete %d-byte output", len(got), len(full))
	}
	return head, tail
}

func TestBound(t *testing.T) {
	small := Limits{MaxLines: 10, MaxBytes: 1024}
	tests := []struct {
		name       string
		lim        Limits
		content    []sdk.Part
		structured []byte
		full       string // the measured text; "" when it stays untouched
		wantHead   string // checked when not empty
		wantTail   string // checked when not empty
	}{
		{
			name:       "UnderLimitUntouched",
			content:    []sdk.Part{sdk.Text("a\nb")},
			structured: []byte(`{"a":1}`),
		},
		{
			name:    "AtLimitsUntouched",
			lim:     small,
			content: []sdk.Part{sdk.Text(strings.Repeat("x", 100) + "\n" + numberedLines(1, 8) + strings.Repeat("y", 1024-101-len(numberedLines(1, 8))))},
		},
		{
			name:     "OverLinesHeadGetsOddLine",
			lim:      small, // 7 lines besides the marker's 3
			content:  []sdk.Part{sdk.Text(numberedLines(1, 100))},
			full:     numberedLines(1, 100),
			wantHead: numberedLines(1, 4),
			wantTail: numberedLines(98, 100),
		},
		{
			name:     "OverLinesEvenBudget",
			lim:      Limits{MaxLines: 9, MaxBytes: 1024},
			content:  []sdk.Part{sdk.Text(numberedLines(1, 10))},
			full:     numberedLines(1, 10),
			wantHead: numberedLines(1, 3),
			wantTail: numberedLines(8, 10),
		},
		{
			name:     "OverLinesWithoutFinalNewline",
			lim:      small,
			content:  []sdk.Part{sdk.Text(numberedLines(1, 11) + "last")},
			full:     numberedLines(1, 11) + "last",
			wantHead: numberedLines(1, 4),
			wantTail: numberedLines(10, 11) + "last",
		},
		{
			name:     "OverBytesKeepsWholeLines",
			lim:      Limits{MaxLines: 2000, MaxBytes: 1024},
			content:  []sdk.Part{sdk.Text(strings.Repeat(strings.Repeat("w", 399)+"\n", 20))},
			full:     strings.Repeat(strings.Repeat("w", 399)+"\n", 20),
			wantHead: strings.Repeat("w", 399) + "\n", // 1 line of half the ~850 bytes the marker leaves
			wantTail: strings.Repeat("w", 399) + "\n",
		},
		{
			name:    "OverBytesCutsSingleLongLine",
			lim:     small,
			content: []sdk.Part{sdk.Text("start" + strings.Repeat("x", 5000) + "end")},
			full:    "start" + strings.Repeat("x", 5000) + "end",
		},
		{
			name:    "MultibyteTwoByteCutsOnRuneBoundaries",
			lim:     small,
			content: []sdk.Part{sdk.Text(strings.Repeat("é", 3001))},
			full:    strings.Repeat("é", 3001),
		},
		{
			name:    "MultibyteMixedWidthsCutOnRuneBoundaries",
			lim:     small,
			content: []sdk.Part{sdk.Text(strings.Repeat("a日😀", 700) + "\n" + strings.Repeat("😀b", 700))},
			full:    strings.Repeat("a日😀", 700) + "\n" + strings.Repeat("😀b", 700),
		},
		{
			name:    "InvalidUTF8StillWithinLimits",
			lim:     small,
			content: []sdk.Part{sdk.Text(strings.Repeat("\xff\x80\xe6", 2000))},
			full:    strings.Repeat("\xff\x80\xe6", 2000),
		},
		{
			name:    "FloorLimits",
			lim:     Limits{MaxLines: MinMaxLines, MaxBytes: MinMaxBytes},
			content: []sdk.Part{sdk.Text(numberedLines(1, 5000))},
			full:    numberedLines(1, 5000),
		},
		{
			name:    "TextPartsMeasuredTogether",
			lim:     small,
			content: []sdk.Part{sdk.Text(numberedLines(1, 6)), sdk.Text(numberedLines(7, 12))},
			full:    numberedLines(1, 6) + "\n" + numberedLines(7, 12),
		},
		{
			// Text and structured output together are over the limits, each alone
			// is within them: structured output is not added to the text.
			name:       "StructuredNotCountedWhenContentExists",
			lim:        small,
			content:    []sdk.Part{sdk.Text(strings.Repeat("t", 800))},
			structured: []byte(`"` + strings.Repeat("s", 900) + `"`),
		},
		{
			name:       "StructuredNotCountedBesideMediaOnly",
			lim:        small,
			content:    []sdk.Part{sdk.Media("image/png", []byte{1, 2, 3})},
			structured: []byte(`"` + strings.Repeat("s", 900) + `"`),
		},
		{
			name:       "StructuredWithinLimitsUntouched",
			lim:        small,
			structured: []byte(`{"a":[1,2,3]}`),
		},
		{
			name:       "StructuredMeasuredWhenContentEmpty",
			lim:        small,
			structured: []byte("[\n" + strings.Repeat("  1,\n", 20) + "  1\n]"),
			full:       "[\n" + strings.Repeat("  1,\n", 20) + "  1\n]",
			wantHead:   "[\n" + strings.Repeat("  1,\n", 3),
			wantTail:   "  1,\n  1\n]",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := openBoundStorage(t)
			content, structured, managed, err := bound(st, tt.lim, tt.content, tt.structured)
			if err != nil {
				t.Fatalf("bound: %v", err)
			}
			if tt.full == "" {
				if len(content) != len(tt.content) || (len(content) > 0 && &content[0] != &tt.content[0]) {
					t.Errorf("content was replaced; want the same slice back")
				}
				if string(structured) != string(tt.structured) {
					t.Errorf("structured changed to %q", structured)
				}
				if managed != nil {
					t.Errorf("managed = %v, want nil", managed)
				}
				return
			}
			if len(managed) != 1 {
				t.Fatalf("managed = %v, want one file", managed)
			}
			if len(tt.content) == 0 {
				if structured != nil {
					t.Errorf("structured = %q, want nil once retained", structured)
				}
			} else if string(structured) != string(tt.structured) {
				t.Errorf("structured changed to %q", structured)
			}
			if len(content) != 1 || content[0].Type != sdk.PartText {
				t.Fatalf("content = %+v, want one text part", content)
			}
			head, tail := checkPreview(t, tt.lim, tt.full, content[0].Text, managed[0])
			if tt.wantHead != "" && head != tt.wantHead {
				t.Errorf("head = %q, want %q", head, tt.wantHead)
			}
			if tt.wantTail != "" && tail != tt.wantTail {
				t.Errorf("tail = %q, want %q", tail, tt.wantTail)
			}
			if head == "" || tail == "" {
				t.Errorf("head %q or tail %q is empty", head, tail)
			}
		})
	}
}

func TestBoundRetainsOversizedStructuredBesideContent(t *testing.T) {
	st := openBoundStorage(t)
	big := []byte(`"` + strings.Repeat("s", 10000) + `"`)
	in := []sdk.Part{sdk.Text("short"), sdk.Media("image/png", []byte{1})}
	content, structured, managed, err := bound(st, Limits{MaxLines: 10, MaxBytes: 1024}, in, big)
	if err != nil {
		t.Fatal(err)
	}
	if structured != nil || len(managed) != 1 {
		t.Fatalf("structured %d bytes, managed %v; want it retained and dropped", len(structured), managed)
	}
	if len(content) != 2 || &content[0] != &in[0] {
		t.Fatal("content within the limits must stay as it is")
	}
	if got, _ := os.ReadFile(managed[0]); string(got) != string(big) {
		t.Fatalf("retained %d bytes, want the complete structured output", len(got))
	}
}

func TestLimitsWithDefaults(t *testing.T) {
	got := Limits{MaxBytes: 4096}.WithDefaults()
	want := Limits{MaxLines: 2000, MaxBytes: 4096, MaxMediaBytes: 5 << 20, MaxRetainedBytes: 1 << 30}
	if got != want {
		t.Errorf("WithDefaults = %+v, want %+v", got, want)
	}
	if d := DefaultLimits(); d != (Limits{}).WithDefaults() || d.Validate() != nil {
		t.Errorf("DefaultLimits = %+v, want the valid zero-value defaults", d)
	}
}

func TestLimitsValidate(t *testing.T) {
	tests := []struct {
		name       string
		lim        Limits
		wantFields []string // named in the error; none means valid
	}{
		{name: "ZeroMeansDefault", lim: Limits{}},
		{name: "AtFloor", lim: Limits{MaxLines: 8, MaxBytes: 1024, MaxMediaBytes: 1}},
		{name: "NegativeLines", lim: Limits{MaxLines: -1}, wantFields: []string{"MaxLines"}},
		{name: "NegativeMedia", lim: Limits{MaxMediaBytes: -5}, wantFields: []string{"MaxMediaBytes"}},
		{name: "LinesBelowFloor", lim: Limits{MaxLines: 7}, wantFields: []string{"MaxLines"}},
		{name: "BytesBelowFloor", lim: Limits{MaxBytes: 1023}, wantFields: []string{"MaxBytes"}},
		{name: "EveryBadFieldNamed", lim: Limits{MaxLines: 1, MaxBytes: -1}, wantFields: []string{"MaxLines", "MaxBytes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.lim.Validate()
			if len(tt.wantFields) == 0 {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidLimits) {
				t.Fatalf("Validate = %v, want ErrInvalidLimits", err)
			}
			for _, f := range tt.wantFields {
				if !strings.Contains(err.Error(), f) {
					t.Errorf("error %q does not name %s", err, f)
				}
			}
		})
	}
}

func TestBoundMediaKeepsOrderAroundPreview(t *testing.T) {
	st := openBoundStorage(t)
	a, b, c := []byte("AAA"), []byte("BBB"), []byte("CCC")
	in := []sdk.Part{
		sdk.Media("image/png", a),
		sdk.Text(numberedLines(1, 50)),
		sdk.Media("audio/wav", b),
		sdk.Text(numberedLines(51, 100)),
		sdk.Media("application/pdf", c),
	}
	lim := Limits{MaxLines: 10, MaxBytes: 1024}
	out, _, managed, err := bound(st, lim, in, nil)
	if err != nil {
		t.Fatalf("bound: %v", err)
	}
	if len(out) != 4 || out[1].Type != sdk.PartText {
		t.Fatalf("content = %+v, want media, preview, media, media", out)
	}
	for i, want := range map[int]sdk.Part{0: in[0], 2: in[2], 3: in[4]} {
		if out[i].Type != sdk.PartMedia || out[i].MIMEType != want.MIMEType || &out[i].Data[0] != &want.Data[0] {
			t.Errorf("part %d = %+v, want the media part %+v unchanged", i, out[i], want)
		}
	}
	checkPreview(t, lim, numberedLines(1, 50)+"\n"+numberedLines(51, 100), out[1].Text, managed[0])
}

func TestBoundMediaLimit(t *testing.T) {
	lim := Limits{MaxLines: 10, MaxBytes: 1024, MaxMediaBytes: 10}
	tests := []struct {
		name    string
		content []sdk.Part
		wantErr *MediaTooLargeError
	}{
		{
			name:    "AtLimitPasses",
			content: []sdk.Part{sdk.Text("hi"), sdk.Media("image/png", make([]byte, 10))},
		},
		{
			name:    "OverLimitFails",
			content: []sdk.Part{sdk.Text("hi"), sdk.Media("image/png", make([]byte, 11))},
			wantErr: &MediaTooLargeError{Index: 1, MIMEType: "image/png", Size: 11, Limit: 10},
		},
		{
			name:    "OverLimitFailsBeforeRetainingText",
			content: []sdk.Part{sdk.Text(numberedLines(1, 100)), sdk.Media("image/jpeg", make([]byte, 12))},
			wantErr: &MediaTooLargeError{Index: 1, MIMEType: "image/jpeg", Size: 12, Limit: 10},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := openBoundStorage(t)
			out, _, managed, err := bound(st, lim, tt.content, nil)
			if tt.wantErr == nil {
				if err != nil || len(out) != len(tt.content) {
					t.Fatalf("bound = %+v, %v; want the content unchanged", out, err)
				}
				return
			}
			var mErr *MediaTooLargeError
			if !errors.As(err, &mErr) || *mErr != *tt.wantErr {
				t.Fatalf("bound error = %v, want %+v", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr.MIMEType) {
				t.Errorf("message %q does not name the MIME type", err)
			}
			if out != nil || managed != nil {
				t.Errorf("bound returned %v, %v beside the error", out, managed)
			}
			if entries := outputFiles(t, st.Dir()); len(entries) != 0 {
				t.Errorf("storage holds %d files after a media error, want none", len(entries))
			}
		})
	}
}

func TestBoundRejectsInvalidLimits(t *testing.T) {
	_, _, _, err := bound(openBoundStorage(t), Limits{MaxBytes: 100}, []sdk.Part{sdk.Text("x")}, nil)
	if !errors.Is(err, ErrInvalidLimits) {
		t.Fatalf("bound error = %v, want ErrInvalidLimits", err)
	}
}

func TestBoundRetentionFailureIsAnError(t *testing.T) {
	st := openBoundStorage(t)
	if err := os.RemoveAll(st.Dir()); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		content    []sdk.Part
		structured []byte
	}{
		{name: "Content", content: []sdk.Part{sdk.Text(numberedLines(1, 3000))}},
		{name: "Structured", structured: []byte(`"` + strings.Repeat("s", 60000) + `"`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, structured, managed, err := bound(st, Limits{}, tt.content, tt.structured)
			var sErr *StorageError
			if !errors.As(err, &sErr) || !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("bound error = %v, want a *StorageError for the missing directory", err)
			}
			if out != nil || structured != nil || managed != nil {
				t.Errorf("bound returned output beside the error")
			}
		})
	}
}

func TestBoundRetainedFile(t *testing.T) {
	st := openBoundStorage(t)
	parts := []sdk.Part{sdk.Text("../../etc/passwd\n" + numberedLines(1, 3000)), sdk.Text("call_123/x")}
	_, _, managed, err := bound(st, Limits{}, parts, nil)
	if err != nil {
		t.Fatalf("bound: %v", err)
	}
	path := managed[0]
	if !filepath.IsAbs(path) || filepath.Dir(path) != st.Dir() {
		t.Errorf("retained at %s, want directly in %s", path, st.Dir())
	}
	if name := filepath.Base(path); !isManagedName(name) || strings.Contains(name, "passwd") || strings.Contains(name, "call") {
		t.Errorf("retained file name %q is not a managed name unrelated to the input", name)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode() != 0o600 {
		t.Errorf("mode = %v, want -rw-------", info.Mode())
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := parts[0].Text + "\n" + parts[1].Text; string(got) != want {
		t.Errorf("retained %d bytes, want the complete %d-byte text", len(got), len(want))
	}
}

func TestBoundConcurrentRetainsNeverCollide(t *testing.T) {
	st := openBoundStorage(t)
	const n = 50
	paths := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			text := strconv.Itoa(i) + "\n" + numberedLines(1, 2500)
			_, _, managed, err := bound(st, Limits{}, []sdk.Part{sdk.Text(text)}, nil)
			if err == nil {
				paths[i] = managed[0]
			}
			errs[i] = err
		})
	}
	wg.Wait()
	seen := make(map[string]bool)
	for i, p := range paths {
		if errs[i] != nil {
			t.Fatalf("bound %d: %v", i, errs[i])
		}
		if seen[p] {
			t.Fatalf("two retains share %s", p)
		}
		seen[p] = true
		got, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if want := strconv.Itoa(i) + "\n" + numberedLines(1, 2500); string(got) != want {
			t.Errorf("file %d does not hold its own output", i)
		}
	}
}

// TestBoundLongestDirFitsFloor checks the floors against the longest directory
// OpenStorage accepts: the marker must still leave room for output.
func TestBoundLongestDirFitsFloor(t *testing.T) {
	dir := t.TempDir()
	for len(dir) < maxStorageDirLen-200 {
		dir = filepath.Join(dir, strings.Repeat("d", 150))
	}
	dir = filepath.Join(dir, strings.Repeat("e", maxStorageDirLen-len(dir)-1))
	st, err := OpenStorage(dir, StorageOptions{})
	if err != nil {
		t.Fatalf("OpenStorage(%d-byte path): %v", len(dir), err)
	}
	lim := Limits{MaxLines: MinMaxLines, MaxBytes: MinMaxBytes}
	full := strings.Repeat(strings.Repeat("9", 50)+"\n", 1<<20/51)
	out, _, managed, err := bound(st, lim, []sdk.Part{sdk.Text(full)}, nil)
	if err != nil {
		t.Fatalf("bound: %v", err)
	}
	head, tail := checkPreview(t, lim, full, out[0].Text, managed[0])
	if head == "" || tail == "" {
		t.Errorf("head %q or tail %q is empty", head, tail)
	}
}

func TestBoundHeadAndTailLines(t *testing.T) {
	tests := []struct {
		name     string
		fn       func(string, int, bool) string
		w        string
		maxLines int
		flag     bool // atEnd for headLines, atStart for tailLines
		want     string
	}{
		{"HeadWholeLines", headLines, "a\nb\nc\nd", 2, false, "a\nb\n"},
		{"HeadDropsPartialLastLine", headLines, "a\nb\ncc", 5, false, "a\nb\n"},
		{"HeadKeepsLastLineAtEnd", headLines, "a\nb\ncc", 5, true, "a\nb\ncc"},
		{"HeadCutsLongFirstLine", headLines, "abcdef", 3, false, "abcdef"},
		{"HeadCutDropsPartialRune", headLines, "ab\xe6\x97", 3, false, "ab"},
		{"HeadCutKeepsCompleteRune", headLines, "ab日", 3, false, "ab日"},
		{"HeadCutDropsPartialFourByteRune", headLines, "ab\xf0\x9f\x98", 3, false, "ab"},
		{"HeadEmpty", headLines, "", 3, true, ""},
		{"TailWholeLines", tailLines, "a\nb\nc\nd\n", 2, false, "c\nd\n"},
		{"TailDropsPartialFirstLine", tailLines, "aa\nb\nc", 5, false, "b\nc"},
		{"TailKeepsFirstLineAtStart", tailLines, "aa\nb\nc", 5, true, "aa\nb\nc"},
		{"TailEmptyLines", tailLines, "x\n\n\n", 2, false, "\n\n"},
		{"TailCutsLongLastLine", tailLines, "abcdef\n", 3, false, "abcdef\n"},
		{"TailCutDropsPartialRune", tailLines, "\x97\xa5本x", 3, false, "本x"},
		{"TailCutInvalidUTF8KeptAsIs", tailLines, "\x80\x80\x80\x80x", 3, false, "\x80\x80\x80\x80x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.fn(tt.w, tt.maxLines, tt.flag); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestBoundLineCount(t *testing.T) {
	tests := []struct {
		name string
		segs []string
		want int
	}{
		{"Empty", nil, 0},
		{"EmptySegments", []string{"", ""}, 0},
		{"OneUnterminatedLine", []string{"a"}, 1},
		{"OneTerminatedLine", []string{"a\n"}, 1},
		{"TwoLines", []string{"a\nb"}, 2},
		{"OnlyNewline", []string{"\n"}, 1},
		{"BlankLines", []string{"\n\n"}, 2},
		{"AcrossSegments", []string{"a", "\n", "b", ""}, 2},
		{"LastSegmentEmpty", []string{"a\n", ""}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := lineCount(tt.segs...); got != tt.want {
				t.Errorf("lineCount(%q) = %d, want %d", tt.segs, got, tt.want)
			}
			if got := lineCount([]byte(strings.Join(tt.segs, ""))); got != tt.want {
				t.Errorf("lineCount(bytes %q) = %d, want %d", tt.segs, got, tt.want)
			}
		})
	}
}

func TestBoundJoinedTextSlice(t *testing.T) {
	text := joinedText[string]{"abc", "\n", "", "de"}
	for i := 0; i <= 6; i++ {
		for j := i; j <= 6; j++ {
			if got, want := text.slice(i, j), "abc\nde"[i:j]; got != want {
				t.Errorf("slice(%d, %d) = %q, want %q", i, j, got, want)
			}
		}
	}
}

// TestBoundTenMiBMakesNoCopy checks that bounding a 10 MiB output allocates less than
// the output's size: the text is scanned and written in place, never copied whole.
func TestBoundTenMiBMakesNoCopy(t *testing.T) {
	text := strings.Repeat("0123456789abcdef\n", 10<<20/17)
	tests := []struct {
		name       string
		content    []sdk.Part
		structured []byte
	}{
		{name: "TextPart", content: []sdk.Part{sdk.Text(text)}},
		{name: "Structured", structured: []byte(text)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := openBoundStorage(t)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_, _, managed, err := bound(st, Limits{}, tt.content, tt.structured)
			runtime.ReadMemStats(&after)
			if err != nil || len(managed) != 1 {
				t.Fatalf("bound = %v, %v; want one retained file", managed, err)
			}
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("bounding %d bytes allocated %d bytes", len(text), alloc)
			if alloc >= uint64(len(text)) {
				t.Errorf("bounding %d bytes allocated %d bytes; the output was copied", len(text), alloc)
			}
		})
	}
}

func BenchmarkBound10MiB(b *testing.B) {
	st := openBoundStorage(b)
	text := strings.Repeat("0123456789abcdef\n", 10<<20/17)
	content := []sdk.Part{sdk.Text(text)}
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		_, _, managed, err := bound(st, Limits{}, content, nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := os.Remove(managed[0]); err != nil {
			b.Fatal(err)
		}
	}
}

func TestBoundTextResourceIsMeasuredAsText(t *testing.T) {
	st := openBoundStorage(t)
	blob := sdk.BlobResource("test://b", "application/octet-stream", []byte("BBB"))
	lim := Limits{MaxLines: 10, MaxBytes: 1024}

	small := []sdk.Part{sdk.TextResource("test://a", "text/plain", "short"), blob}
	out, _, managed, err := bound(st, lim, small, nil)
	if err != nil || len(managed) != 0 || len(out) != 2 || out[0].URI != "test://a" {
		t.Fatalf("within the limits: content %+v, managed %v, err %v; want it unchanged", out, managed, err)
	}

	in := []sdk.Part{sdk.Text(numberedLines(1, 5)), sdk.TextResource("test://a", "text/plain", numberedLines(6, 50)), blob}
	out, _, managed, err = bound(st, lim, in, nil)
	if err != nil {
		t.Fatalf("bound: %v", err)
	}
	if len(out) != 2 || out[0].Type != sdk.PartText || out[1].URI != "test://b" || !out[1].IsBlob() {
		t.Fatalf("content = %+v, want the preview, then the blob resource", out)
	}
	checkPreview(t, lim, numberedLines(1, 5)+"\n"+numberedLines(6, 50), out[0].Text, managed[0])

	if _, _, _, err := bound(st, Limits{MaxLines: 10, MaxBytes: 1024, MaxMediaBytes: 2}, []sdk.Part{blob}, nil); err == nil {
		t.Error("a blob resource over MaxMediaBytes: no error")
	}
}
