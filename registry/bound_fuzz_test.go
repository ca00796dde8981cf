package registry

import (
	"os"
	"strings"
	"testing"

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
