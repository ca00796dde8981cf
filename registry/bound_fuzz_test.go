package registry

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/toolhost/toolhost/sdk"
)

func FuzzBound(f *testing.F) {
	f.Add("", uint16(0), uint16(0))
	f.Add("a\nb\nc\n", uint16(0), uint16(0))
	f.Add(strings.Repeat("line\n", 100), uint16(3), uint16(0))
	f.Add(strings.Repeat("é日😀", 2000), uint16(0), uint16(7))
	f.Add(strings.Repeat("x", 3000)+"\n"+strings.Repeat("y", 3000), uint16(100), uint16(500))
	f.Add(strings.Repeat("\xff\xe6\x97", 1000), uint16(1), uint16(1))
	st := openBoundStorage(f)

	f.Fuzz(func(t *testing.T, text string, maxLines, maxBytes uint16) {
		lim := Limits{
			MaxLines:      MinMaxLines + int(maxLines)%256,
			MaxBytes:      MinMaxBytes + int(maxBytes)%4096,
			MaxMediaBytes: 1,
		}
		media := sdk.Media("image/png", []byte{1})
		// The same text as one part, as parts split at newlines around media (their
		// "\n" join restores it), and as structured output.
		split := []sdk.Part{media}
		for _, s := range strings.SplitN(text, "\n", 3) {
			split = append(split, sdk.Text(s), media)
		}
		inputs := []struct {
			content    []sdk.Part
			structured []byte
		}{
			{content: []sdk.Part{sdk.Text(text)}},
			{content: split},
			{structured: []byte(text)},
		}
		fits := len(text) <= lim.MaxBytes && lineCount(text) <= lim.MaxLines
		for _, in := range inputs {
			content, _, managed, err := bound(st, lim, in.content, in.structured)
			if err != nil {
				t.Fatalf("bound: %v", err)
			}
			if fits {
				if managed != nil || len(content) != len(in.content) {
					t.Fatalf("output within %+v was changed", lim)
				}
				continue
			}
			if len(managed) != 1 {
				t.Fatalf("managed = %v, want one file", managed)
			}
			var preview []string
			for _, p := range content {
				if p.Type == sdk.PartText {
					preview = append(preview, p.Text)
				}
			}
			wantMedia := 0
			for _, p := range in.content {
				if p.Type == sdk.PartMedia {
					wantMedia++
				}
			}
			if len(preview) != 1 || len(content) != 1+wantMedia {
				t.Fatalf("content = %+v, want the media parts and one preview", content)
			}
			checkPreview(t, lim, text, preview[0], managed[0])
			if err := os.Remove(managed[0]); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// FuzzBoundMessage holds a refusal's bounded text to its limits for any message and
// problem list: within the limits it is whole; over them the whole text is retained,
// the preview names the file, and the problems shown are the first ones, each as the
// preview shows it.
func FuzzBoundMessage(f *testing.F) {
	f.Add("tool failed", "", 0, uint16(0), uint16(0))
	f.Add(strings.Repeat("x\n", 5000), "", 0, uint16(3), uint16(0))
	f.Add(`invalid input for "t":`, "/items/0", 5000, uint16(0), uint16(0))
	f.Add("head", strings.Repeat("é\n", 3000), 40, uint16(100), uint16(500))
	f.Add("head", "/a", 2, uint16(0), uint16(0))
	st := openBoundStorage(f)

	f.Fuzz(func(t *testing.T, head, problem string, n int, maxLines, maxBytes uint16) {
		lim := Limits{MaxLines: MinMaxLines + int(maxLines)%256, MaxBytes: MinMaxBytes + int(maxBytes)%4096}
		m := refusalText{head: head}
		for i := range max(n, 0) % 6000 {
			m.problems = append(m.problems, Problem{Pointer: problem + "/" + strconv.Itoa(i), Message: problem})
		}
		if len(m.problems) > 0 {
			m.tail = []string{"received keys: " + problem}
		}
		full := m.segments()
		whole := full.slice(0, full.size())
		text, shown, path, err := boundMessage(st, lim, m)
		if err != nil {
			t.Fatalf("boundMessage: %v", err)
		}
		if path == "" {
			if text != whole || len(shown) != len(m.problems) {
				t.Fatalf("a message within %+v was changed", lim)
			}
			return
		}
		defer os.Remove(path)
		if len(text) > lim.MaxBytes || lineCount(text) > lim.MaxLines {
			t.Fatalf("preview is %d bytes, %d lines: over %+v", len(text), lineCount(text), lim)
		}
		if !strings.Contains(text, path) {
			t.Fatalf("preview does not name %s", path)
		}
		if utf8.ValidString(whole) && !utf8.ValidString(text) {
			t.Fatalf("preview of valid UTF-8 is not valid UTF-8")
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != whole {
			t.Fatalf("retained %d bytes (%v), want the whole %d-byte message", len(got), err, len(whole))
		}
		for i, p := range shown {
			if !strings.HasPrefix(m.problems[i].Pointer, strings.TrimRight(strings.TrimSuffix(p.Pointer, "…"), " ")) || !strings.Contains(text, "\n- "+p.String()) {
				t.Fatalf("problem %d shown as %+v, not the message's problem %d as the preview shows it", i, p, i)
			}
		}
	})
}
