package main

import (
	"flag"
	"io"

	"github.com/hashicorp/go-hclog"
)

// logJSONUsage is the --log-json flag's help, the same on every command
// that logs (serve's is the log_json setting's flag).
const logJSONUsage = "log JSON lines instead of text"

// bindLogJSON adds --log-json to a command that logs.
func bindLogJSON(fs *flag.FlagSet, json *bool) {
	fs.BoolVar(json, "log-json", *json, logJSONUsage)
}

// newLogger is the logger of a command: level as --log-level names it,
// JSON lines with --log-json, to w (the command's stderr).
func newLogger(w io.Writer, level string, json bool) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "tallyd", Level: hclog.LevelFromString(level), Output: w, JSONFormat: json})
}

// logOptions are --log-level and --log-json of a command whose parser
// returns them.
type logOptions struct {
	Level string
	JSON  bool
}
