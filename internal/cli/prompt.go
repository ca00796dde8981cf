package cli

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"golang.org/x/term"

	"github.com/toolhost/toolhost/permission"
)

// isTerminal reports whether r is a terminal a person can answer on. It asks the
// terminal driver: /dev/null and other character devices are not terminals.
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// promptAsker asks the person at the terminal, one ask at a time: once, always, or
// reject with an optional message for the model.
type promptAsker struct {
	mu  sync.Mutex
	in  *bufio.Reader
	out io.Writer
}

func newPromptAsker(in io.Reader, out io.Writer) *promptAsker {
	return &promptAsker{in: bufio.NewReader(in), out: out}
}

var _ permission.Asker = (*promptAsker)(nil)

func (p *promptAsker) Ask(ctx context.Context, _ string, req permission.Request) (permission.Answer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.out, "\npermission: tool %q asks to %s %s\n", req.Source.Tool, req.Action, strings.Join(req.Resources, ", "))
	for {
		fmt.Fprint(p.out, "allow? [o]nce, [a]lways, [r]eject: ")
		line, err := p.readLine(ctx)
		if err != nil {
			return permission.Answer{}, err
		}
		switch strings.ToLower(line) {
		case "o", "once", "y", "yes":
			return permission.Answer{Reply: permission.Once}, nil
		case "a", "always":
			return permission.Answer{Reply: permission.Always}, nil
		case "r", "reject", "n", "no":
			fmt.Fprint(p.out, "message for the model (empty: decline without one): ")
			msg, err := p.readLine(ctx)
			if err != nil {
				return permission.Answer{}, err
			}
			return permission.Answer{Reply: permission.Reject, Message: msg}, nil
		}
	}
}

// readLine reads one line, giving up when ctx ends. A read from a terminal cannot be
// interrupted, so on cancellation the reading goroutine finishes with the next line
// (or end of input) on its own.
func (p *promptAsker) readLine(ctx context.Context) (string, error) {
	type result struct {
		line string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		line, err := p.in.ReadString('\n')
		if err == io.EOF && line != "" {
			err = nil
		}
		done <- result{strings.TrimSpace(line), err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return "", fmt.Errorf("toolhost: read the answer: %w", r.err)
		}
		return r.line, nil
	case <-ctx.Done():
		return "", context.Cause(ctx)
	}
}
