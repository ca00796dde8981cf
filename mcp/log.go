package mcp

import (
	"context"
	"log/slog"

	"github.com/hashicorp/go-hclog"
)

// slogHandler forwards the go-sdk's slog records to an hclog.Logger.
type slogHandler struct {
	log   hclog.Logger
	attrs []any
}

func newSlog(log hclog.Logger) *slog.Logger { return slog.New(&slogHandler{log: log}) }

func (h *slogHandler) Enabled(_ context.Context, l slog.Level) bool {
	switch hclogLevel(l) {
	case hclog.Error:
		return h.log.IsError()
	case hclog.Warn:
		return h.log.IsWarn()
	case hclog.Info:
		return h.log.IsInfo()
	}
	return h.log.IsDebug()
}

func (h *slogHandler) Handle(_ context.Context, r slog.Record) error {
	args := append([]any(nil), h.attrs...)
	r.Attrs(func(a slog.Attr) bool {
		args = append(args, a.Key, a.Value.Any())
		return true
	})
	h.log.Log(hclogLevel(r.Level), r.Message, args...)
	return nil
}

func (h *slogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	n := &slogHandler{log: h.log, attrs: append([]any(nil), h.attrs...)}
	for _, a := range attrs {
		n.attrs = append(n.attrs, a.Key, a.Value.Any())
	}
	return n
}

func (h *slogHandler) WithGroup(name string) slog.Handler {
	return &slogHandler{log: h.log.Named(name), attrs: h.attrs}
}

func hclogLevel(l slog.Level) hclog.Level {
	switch {
	case l >= slog.LevelError:
		return hclog.Error
	case l >= slog.LevelWarn:
		return hclog.Warn
	case l >= slog.LevelInfo:
		return hclog.Info
	}
	return hclog.Debug
}

// serverLog logs one notifications/message of the server within the server's log
// budget (loglimit: a server sending them without pause is held back, and what is
// held back is counted); data longer than loglimit.MaxText is cut.
func (inst *Instance) serverLog(level hclog.Level, logger, data string) {
	inst.logs.Log(level, "server log", "server", inst.cfg.Name, "logger", logger, "data", data)
}
