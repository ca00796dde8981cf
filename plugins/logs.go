package plugins

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/toolhost/toolhost/internal/loglimit"
	"github.com/toolhost/toolhost/internal/proc"
)

// pluginLog takes what a plugin writes — to its stderr (an hclog JSON line, or any
// other line), and to os.Stderr and os.Stdout, which go-plugin carries over the
// connection — line by line into the host's log, named by the plugin and within
// the plugin's log budget (loglimit), and keeps the stderr tail. go-plugin itself
// is given none of it: it would log plain lines at debug level only, drop what
// comes over the connection, and panic on a JSON line whose "@message" is not a
// string.
type pluginLog struct {
	name string
	logs *loglimit.Logger
	tail *proc.Ring

	mu      sync.Mutex
	inPanic bool // a panic's trace is being written: its plain lines are errors
}

// maxLogLine is the longest line taken from a plugin; the rest of a longer line is
// dropped, saying how much.
const maxLogLine = loglimit.MaxText

// line takes one line (without its newline) from stream ("stderr" or "stdout");
// cut is how many bytes of it were dropped.
func (p *pluginLog) line(stream string, line []byte, cut int) {
	if stream == "stderr" {
		p.tail.Write(line)
		p.tail.Write([]byte{'\n'})
	}
	line = bytes.TrimRight(line, "\r")
	if len(line) == 0 {
		return
	}
	if cut == 0 && line[0] == '{' {
		if level, msg, kv, ok := parseHCLogLine(line); ok {
			p.logs.Log(level, msg, append([]any{"plugin", p.name}, kv...)...)
			return
		}
	}
	text := string(line)
	if cut > 0 {
		text += "… (" + strconv.Itoa(cut) + " bytes cut)"
	}
	p.logs.Log(p.plainLevel(text), text, "plugin", p.name, "stream", stream)
}

// plainLevel infers a plain line's level: an hclog-style "[WARN]" prefix, a Go
// panic's trace, else info.
func (p *pluginLog) plainLevel(line string) hclog.Level {
	p.mu.Lock()
	defer p.mu.Unlock()
	for prefix, level := range map[string]hclog.Level{"[TRACE]": hclog.Trace, "[DEBUG]": hclog.Debug, "[INFO]": hclog.Info, "[WARN]": hclog.Warn, "[ERROR]": hclog.Error} {
		if strings.HasPrefix(line, prefix) {
			return level
		}
	}
	if strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: ") {
		p.inPanic = true
	}
	if p.inPanic {
		return hclog.Error
	}
	return hclog.Info
}

// parseHCLogLine reads an hclog JSON line: its level, message and other fields
// (sorted by key; "@timestamp", "@module" and "@caller" left out). ok is false for
// anything else, a JSON line without a string "@message" included.
func parseHCLogLine(line []byte) (level hclog.Level, msg string, kv []any, ok bool) {
	var fields map[string]any
	if json.Unmarshal(line, &fields) != nil {
		return 0, "", nil, false
	}
	msg, ok = fields["@message"].(string)
	if !ok {
		return 0, "", nil, false
	}
	levelName, _ := fields["@level"].(string)
	level = hclog.LevelFromString(levelName)
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		switch k {
		case "@message", "@level", "@timestamp", "@module", "@caller":
		default:
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := fields[k]
		if _, isString := v.(string); !isString {
			b, _ := json.Marshal(v)
			v = string(b)
		}
		kv = append(kv, k, v)
	}
	return level, msg, kv, true
}

// readLines reads r to its end, giving p each line of stream.
func (p *pluginLog) readLines(stream string, r io.Reader) {
	br := bufio.NewReaderSize(r, maxLogLine)
	for {
		line, err := br.ReadSlice('\n')
		cut := 0
		if errors.Is(err, bufio.ErrBufferFull) {
			line = slices.Clone(line)
			for errors.Is(err, bufio.ErrBufferFull) { // the rest of a long line
				var more []byte
				more, err = br.ReadSlice('\n')
				cut += len(bytes.TrimSuffix(more, []byte{'\n'}))
			}
		}
		if line = bytes.TrimSuffix(line, []byte{'\n'}); len(line) > 0 || cut > 0 {
			p.line(stream, line, cut)
		}
		if err != nil {
			return
		}
	}
}

// writer returns a writer of stream for go-plugin's SyncStderr and SyncStdout: it
// splits what it is given into lines for p. A line is given to p when its newline
// comes; the writer keeps at most maxLogLine bytes of a longer one.
func (p *pluginLog) writer(stream string) io.Writer { return &lineWriter{p: p, stream: stream} }

type lineWriter struct {
	p      *pluginLog
	stream string
	mu     sync.Mutex
	buf    []byte
	cut    int
}

func (w *lineWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		chunk := b
		if i >= 0 {
			chunk = b[:i]
		}
		room := maxLogLine - len(w.buf)
		if len(chunk) > room {
			w.cut += len(chunk) - room
			chunk = chunk[:room]
		}
		w.buf = append(w.buf, chunk...)
		if i < 0 {
			break
		}
		w.p.line(w.stream, w.buf, w.cut)
		w.buf, w.cut = w.buf[:0], 0
		b = b[i+1:]
	}
	return n, nil
}
