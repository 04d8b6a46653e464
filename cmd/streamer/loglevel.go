package main

import (
	"fmt"
	"log/slog"
	"strings"
)

// parseLogLevel reads --log-level. It takes the four names only, not
// slog's offsets such as "info+2", which nobody types on purpose.
func parseLogLevel(name string) (slog.Level, error) {
	switch strings.ToLower(name) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("--log-level %q: want debug, info, warn or error", name)
}
