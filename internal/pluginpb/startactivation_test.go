package pluginpb

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

func TestActivationLineRoundTrip(t *testing.T) {
	res := &ActivateResponse{Registrations: []*RegisterRequest{{Registration: 1, Tools: []*ToolDefinition{{Name: "echo", InputSchema: []byte(`{"type":"object"}`)}}}}}
	line, err := ActivationLine(res, nil)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Count(line, []byte("\n")) != 1 || line[len(line)-1] != '\n' {
		t.Fatalf("not one line: %q", line)
	}
	got, err := ParseActivationLine(bytes.TrimSuffix(line, []byte("\n")))
	if err != nil || !proto.Equal(got, res) {
		t.Fatalf("parsed %v, %v; want %v", got, err, res)
	}

	line, _ = ActivationLine(nil, status.Error(codes.Aborted, "missing API key"))
	_, err = ParseActivationLine(bytes.TrimSuffix(line, []byte("\n")))
	if st, ok := status.FromError(err); !ok || st.Code() != codes.Aborted || st.Message() != "missing API key" {
		t.Fatalf("failure parsed as %v", err)
	}
}

func TestParseActivationLineRefusesMalformedLines(t *testing.T) {
	okStatus, _ := ActivationLine(nil, status.Error(codes.OK, ""))
	for _, line := range []string{
		"",
		"1|3|unix|/tmp/x|grpc|",
		"toolhost-activation ",
		"toolhost-activation maybe AAAA",
		"toolhost-activation ok !!!",
		"toolhost-activation ok " + "/w==", // not a message
		"toolhost-activation failed ////",
		strings.TrimSpace(strings.Replace(string(okStatus), "ok ", "failed ", 1)), // a failure without an error
	} {
		if _, err := ParseActivationLine([]byte(line)); !errors.Is(err, ErrActivationLine) {
			t.Errorf("%q: err = %v, want ErrActivationLine", line, err)
		}
	}
}

// TestStdoutFilter: the activation lines are taken out of a plugin's standard output
// wherever they come, the first delivered, and everything else passes as it was
// written, however the reads are cut, with lines longer than the buffer.
func TestStdoutFilter(t *testing.T) {
	line, _ := ActivationLine(&ActivateResponse{Registrations: []*RegisterRequest{{Registration: 7}}}, nil)
	long := strings.Repeat("y", 200<<10) + "\n"
	for _, tt := range []struct {
		name, before, after string
	}{
		{"Alone", "", ""},
		{"BeforeHandshake", "", "1|3|unix|/tmp/plugin|grpc|\n"},
		{"AfterOutput", "noise before\n1|3|unix|/tmp/plugin|grpc|\n", "and after\n"},
		{"LongLines", long, long},
		{"LastLineUnended", long, "tail without newline"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			input := tt.before + string(line) + tt.after
			if strings.HasSuffix(input, "\n") {
				input += string(line) // the second is dropped
			}
			for _, cut := range []func(io.Reader) io.Reader{func(r io.Reader) io.Reader { return r }, iotest.OneByteReader, iotest.HalfReader} {
				f := NewStdoutFilter(io.NopCloser(cut(strings.NewReader(input))), 0)
				got, err := io.ReadAll(f)
				if err != nil {
					t.Fatal(err)
				}
				if want := tt.before + tt.after; string(got) != want {
					t.Fatalf("passed %d bytes, want %d: %.80q...", len(got), len(want), got)
				}
				select {
				case a := <-f.Activation():
					if res, err := ParseActivationLine(a); err != nil || res.Registrations[0].Registration != 7 {
						t.Fatalf("activation line %v, %v", res, err)
					}
				default:
					t.Fatal("no activation line")
				}
			}
		})
	}
}

func TestStdoutFilterCutsAnOverlongActivationLine(t *testing.T) {
	input := activationLinePrefix + "ok " + strings.Repeat("A", MaxActivationLine+100) + "\nafter\n"
	f := NewStdoutFilter(io.NopCloser(strings.NewReader(input)), 0)
	got, err := io.ReadAll(f)
	if err != nil || string(got) != "after\n" {
		t.Fatalf("passed %.40q (%v), want only the line after", got, err)
	}
	a := <-f.Activation()
	if len(a) > MaxActivationLine+64<<10 {
		t.Fatalf("activation line of %d bytes, over the limit", len(a))
	}
}
