package pluginpb

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// StartActivationVersion is the go-plugin application protocol version at which a
// plugin activates as it starts, before its server is up, instead of when the host
// calls Activate. The host puts the ActivateRequest in StartActivationEnv; the
// plugin activates, prints the outcome on its standard output as one line
// (ActivationLine), and then serves as at ConnTokenVersion, which this version
// includes. The host reads the line off the plugin's standard output
// (NewStdoutFilter) and makes no Activate call: a launch saves a round trip on a
// connection that is still cold (BENCHMARKS.md, "Activation", has what it saves).
// Go-plugin picks the version, so a plugin of an older sdk is
// activated by a call as before.
//
// Only a host that launches the plugin uses it; a plugin it attaches to (started
// by hand with -debug) is activated by a call.
const StartActivationVersion = 3

// StartActivationEnv carries the ActivateRequest to a plugin the host offers
// StartActivationVersion, encoded by EncodeActivateRequest.
const StartActivationEnv = "TOOLHOST_ACTIVATE"

// MaxStartActivationRequest is the largest encoded request the host puts in the
// environment (Linux refuses a single variable above 128 KiB); a larger one (a plugin
// with large options) is sent with the Activate call instead.
const MaxStartActivationRequest = 64 << 10

// MaxActivationLine bounds the activation line the host reads unless told a
// smaller bound (NewStdoutFilter): the registrations of an activation, as
// Tools.Register bounds one batch.
const MaxActivationLine = 96 << 20

// activationLinePrefix starts the activation line; "ok " or "failed " follows, then
// base64 of an ActivateResponse or of a google.rpc.Status.
const activationLinePrefix = "toolhost-activation "

// EncodeActivateRequest encodes req for StartActivationEnv; ok is false when the
// result is above MaxStartActivationRequest.
func EncodeActivateRequest(req *ActivateRequest) (value string, ok bool, err error) {
	data, err := req.MarshalVT()
	if err != nil {
		return "", false, err
	}
	if base64.StdEncoding.EncodedLen(len(data)) > MaxStartActivationRequest {
		return "", false, nil
	}
	return base64.StdEncoding.EncodeToString(data), true, nil
}

// StartActivationRequest returns the activation request the host left in the
// environment, and removes it from the environment (it is not for the plugin's own
// children); nil when the host did not offer StartActivationVersion.
func StartActivationRequest() (*ActivateRequest, error) {
	value, ok := os.LookupEnv(StartActivationEnv)
	if !ok {
		return nil, nil
	}
	os.Unsetenv(StartActivationEnv)
	if !offered(StartActivationVersion) {
		return nil, nil
	}
	data, err := base64.StdEncoding.DecodeString(value)
	if err != nil {
		return nil, fmt.Errorf("pluginpb: %s: %w", StartActivationEnv, err)
	}
	req := &ActivateRequest{}
	if err := req.UnmarshalVT(data); err != nil {
		return nil, fmt.Errorf("pluginpb: %s: %w", StartActivationEnv, err)
	}
	return req, nil
}

// offered reports whether the host offered protocol version v (in go-plugin's
// PLUGIN_PROTOCOL_VERSIONS).
func offered(v int) bool {
	for s := range strings.SplitSeq(os.Getenv("PLUGIN_PROTOCOL_VERSIONS"), ",") {
		if n, err := strconv.Atoi(s); err == nil && n == v {
			return true
		}
	}
	return false
}

// ActivationLine is the line a plugin prints for an activation that returned res, or
// failed with err (a gRPC status error, as the Activate call would return).
func ActivationLine(res *ActivateResponse, err error) ([]byte, error) {
	outcome := "ok "
	var data []byte
	var merr error
	if err != nil {
		outcome = "failed "
		data, merr = proto.Marshal(status.Convert(err).Proto())
	} else {
		data, merr = res.MarshalVT()
	}
	if merr != nil {
		return nil, merr
	}
	line := make([]byte, 0, len(activationLinePrefix)+len(outcome)+base64.StdEncoding.EncodedLen(len(data))+1)
	line = append(line, activationLinePrefix...)
	line = append(line, outcome...)
	line = base64.StdEncoding.AppendEncode(line, data)
	return append(line, '\n'), nil
}

// ErrActivationLine is wrapped by ParseActivationLine's error for a line that is not
// a well-formed activation line.
var ErrActivationLine = errors.New("malformed activation line")

// ParseActivationLine decodes an activation line (without its newline): the
// response, or the activation's failure as a gRPC status error. An error wrapping
// ErrActivationLine says the line is not one.
func ParseActivationLine(line []byte) (*ActivateResponse, error) {
	rest, ok := bytes.CutPrefix(line, []byte(activationLinePrefix))
	if !ok {
		return nil, fmt.Errorf("%w: no %q prefix", ErrActivationLine, activationLinePrefix)
	}
	var failed bool
	if r, ok := bytes.CutPrefix(rest, []byte("ok ")); ok {
		rest = r
	} else if r, ok := bytes.CutPrefix(rest, []byte("failed ")); ok {
		rest, failed = r, true
	} else {
		return nil, fmt.Errorf("%w: neither ok nor failed", ErrActivationLine)
	}
	data, err := base64.StdEncoding.AppendDecode(nil, rest)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrActivationLine, err)
	}
	if failed {
		st := &spb.Status{}
		if err := proto.Unmarshal(data, st); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrActivationLine, err)
		}
		if st.Code == int32(codes.OK) {
			return nil, fmt.Errorf("%w: a failure without an error", ErrActivationLine)
		}
		return nil, status.FromProto(st).Err()
	}
	res := &ActivateResponse{}
	if err := res.UnmarshalVT(data); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrActivationLine, err)
	}
	return res, nil
}

// StdoutFilter is a plugin's standard output with its activation lines taken out:
// reads return everything else, as the plugin wrote it, for go-plugin's handshake
// reader; the first activation line (at most its limit of bytes) goes to
// Activation, and any later one is dropped. The filter works within its reader's
// reads: go-plugin reads a plugin's standard output from its start, so the line,
// which the plugin prints before its handshake, is taken out as soon as it is
// written.
type StdoutFilter struct {
	src        io.ReadCloser
	br         *bufio.Reader
	activation chan []byte
	once       sync.Once
	passing    []byte // what is left of the chunk being passed through
	midLine    bool   // the last chunk passed did not end its line
	skipping   bool   // dropping the rest of an activation line over the limit
	maxLine    int
}

// NewStdoutFilter filters r, taking an activation line of at most maxLine bytes
// (MaxActivationLine when maxLine is not positive or larger). Its buffer is bufio's
// default, 4 KiB: it lives as long as the plugin, and a longer activation line is
// assembled from several reads.
func NewStdoutFilter(r io.ReadCloser, maxLine int) *StdoutFilter {
	if maxLine <= 0 || maxLine > MaxActivationLine {
		maxLine = MaxActivationLine
	}
	return &StdoutFilter{src: r, br: bufio.NewReader(r), activation: make(chan []byte, 1), maxLine: maxLine}
}

// Activation delivers the activation line (without its newline) once it is read. A
// line over the filter's limit is delivered cut short, which does not parse.
func (f *StdoutFilter) Activation() <-chan []byte { return f.activation }

func (f *StdoutFilter) Read(p []byte) (int, error) {
	for len(f.passing) == 0 {
		chunk, err := f.br.ReadSlice('\n') // valid until the next read of br
		full := errors.Is(err, bufio.ErrBufferFull)
		switch {
		case f.skipping:
			f.skipping = full
		case !f.midLine && bytes.HasPrefix(chunk, []byte(activationLinePrefix)):
			line := slices.Clone(chunk)
			for full && len(line) <= f.maxLine {
				chunk, err = f.br.ReadSlice('\n')
				full = errors.Is(err, bufio.ErrBufferFull)
				line = append(line, chunk...)
			}
			f.deliver(bytes.TrimSuffix(line, []byte{'\n'}))
			f.skipping = full
		default:
			f.midLine = full
			f.passing = chunk
		}
		if err != nil && !full {
			if len(f.passing) > 0 {
				break // the data now, the error on the next read
			}
			return 0, err
		}
	}
	n := copy(p, f.passing)
	f.passing = f.passing[n:]
	return n, nil
}

// deliver hands the first activation line over; later ones are dropped.
func (f *StdoutFilter) deliver(line []byte) {
	f.once.Do(func() { f.activation <- line })
}

// Close closes the plugin's standard output.
func (f *StdoutFilter) Close() error { return f.src.Close() }
