package plugin

import (
	"context"
	"io"
	"log"
	"log/slog"

	"github.com/hashicorp/go-hclog"
)

// hcLogger routes go-plugin's own log lines into a slog.Logger.
//
// go-plugin also re-logs every line the plugin writes on stderr, through a
// logger named after the binary. Those lines already reach Config.Output
// whole, so that logger is silenced rather than printing each twice. Its
// "stdio" logger only says, at warning level, that a plugin in another
// language does not stream its stdout over gRPC, which is expected: those
// lines go to debug.
type hcLogger struct {
	log      *slog.Logger
	name     string
	binary   string // the plugin binary's base name: the logger to silence
	args     []any
	demote   bool // log everything at debug
	disabled bool
}

func newHCLogger(log *slog.Logger, binary string) hclog.Logger {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &hcLogger{log: log.With("component", "go-plugin"), binary: binary}
}

func (l *hcLogger) Log(level hclog.Level, msg string, args ...any) {
	if l.disabled || level == hclog.Off {
		return
	}
	lvl := slogLevel(level)
	if l.demote {
		lvl = slog.LevelDebug
	}
	ctx := context.Background()
	if !l.log.Enabled(ctx, lvl) {
		return
	}
	attrs := make([]any, 0, len(l.args)+len(args)+2)
	if l.name != "" {
		attrs = append(attrs, "logger", l.name)
	}
	attrs = append(attrs, l.args...)
	attrs = append(attrs, args...)
	l.log.Log(ctx, lvl, msg, attrs...)
}

func slogLevel(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

func (l *hcLogger) Trace(msg string, args ...any) { l.Log(hclog.Trace, msg, args...) }
func (l *hcLogger) Debug(msg string, args ...any) { l.Log(hclog.Debug, msg, args...) }
func (l *hcLogger) Info(msg string, args ...any)  { l.Log(hclog.Info, msg, args...) }
func (l *hcLogger) Warn(msg string, args ...any)  { l.Log(hclog.Warn, msg, args...) }
func (l *hcLogger) Error(msg string, args ...any) { l.Log(hclog.Error, msg, args...) }

func (l *hcLogger) enabled(level hclog.Level) bool {
	return !l.disabled && l.log.Enabled(context.Background(), slogLevel(level))
}

func (l *hcLogger) IsTrace() bool { return l.enabled(hclog.Trace) }
func (l *hcLogger) IsDebug() bool { return l.enabled(hclog.Debug) }
func (l *hcLogger) IsInfo() bool  { return l.enabled(hclog.Info) }
func (l *hcLogger) IsWarn() bool  { return l.enabled(hclog.Warn) }
func (l *hcLogger) IsError() bool { return l.enabled(hclog.Error) }

func (l *hcLogger) ImpliedArgs() []any { return l.args }

func (l *hcLogger) With(args ...any) hclog.Logger {
	c := *l
	c.args = append(append([]any(nil), l.args...), args...)
	return &c
}

func (l *hcLogger) Name() string { return l.name }

func (l *hcLogger) Named(name string) hclog.Logger {
	c := *l
	switch name {
	case l.binary:
		c.disabled = true
	case "stdio":
		c.demote = true
	}
	if c.name != "" {
		name = c.name + "." + name
	}
	c.name = name
	return &c
}

func (l *hcLogger) ResetNamed(name string) hclog.Logger {
	c := *l
	c.name = name
	return &c
}

// SetLevel does nothing: the slog handler decides what is shown.
func (l *hcLogger) SetLevel(hclog.Level) {}

func (l *hcLogger) GetLevel() hclog.Level {
	for _, level := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
		if l.enabled(level) {
			return level
		}
	}
	return hclog.Off
}

func (l *hcLogger) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	return slog.NewLogLogger(l.log.Handler(), slog.LevelInfo)
}

func (l *hcLogger) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	return l.StandardLogger(opts).Writer()
}
