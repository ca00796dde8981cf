package mcpserve

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"
)

// logBuffer is how many log messages may wait for the sessions; more are dropped.
const logBuffer = 256

type logEntry struct {
	name  string
	level gomcp.LoggingLevel
	msg   string
	args  []any
}

// LogSink returns an hclog sink that sends every message to the client sessions as
// notifications/message (each session gets those at or above the level it set with
// logging/setLevel). Register it on the hclog.InterceptLogger the Locations log to.
// It never blocks: when the sessions fall behind, messages are dropped.
func (s *Server) LogSink() hclog.SinkAdapter { return logSink{s} }

type logSink struct{ s *Server }

func (l logSink) Accept(name string, level hclog.Level, msg string, args ...any) {
	e := logEntry{name: name, level: mcpLevel(level), msg: msg, args: args}
	select {
	case l.s.logs <- e:
	default:
	}
}

func mcpLevel(l hclog.Level) gomcp.LoggingLevel {
	switch {
	case l <= hclog.Debug:
		return "debug"
	case l == hclog.Info:
		return "info"
	case l == hclog.Warn:
		return "warning"
	}
	return "error"
}

// sendLogs sends queued log messages to every session until Close.
func (s *Server) sendLogs() {
	defer s.done.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case e := <-s.logs:
			data := map[string]any{"message": e.msg}
			for i := 0; i+1 < len(e.args); i += 2 {
				data[fmt.Sprint(e.args[i])] = fmt.Sprint(e.args[i+1])
			}
			for ss := range s.mcp.Sessions() {
				ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
				_ = ss.Log(ctx, &gomcp.LoggingMessageParams{Level: e.level, Logger: e.name, Data: data})
				cancel()
			}
		}
	}
}
