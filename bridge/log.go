package main

import (
	"encoding/json"
	"io"
	"os"
	"sync"
	"time"
)

// stderrMu serialises the bridge's JSON log lines and the child's passed-through stderr, so a
// log line is never cut by a chunk of the child's output.
var stderrMu sync.Mutex
var stderrOut io.Writer = os.Stderr

// logEvent writes one JSON log line on stderr: {"ts", "level", "logger":"baton-bridge", "msg", ...}.
func logEvent(level, msg string, kv ...any) {
	rec := map[string]any{
		"ts":     time.Now().UTC().Format(time.RFC3339Nano),
		"level":  level,
		"logger": "baton-bridge",
		"msg":    msg,
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if k, ok := kv[i].(string); ok {
			rec[k] = kv[i+1]
		}
	}
	b, err := json.Marshal(rec)
	if err != nil {
		b = []byte(`{"level":"error","logger":"baton-bridge","msg":"unloggable record"}`)
	}
	b = append(b, '\n')
	stderrMu.Lock()
	defer stderrMu.Unlock()
	_, _ = stderrOut.Write(b)
}

func passStderr(p []byte) {
	stderrMu.Lock()
	defer stderrMu.Unlock()
	_, _ = stderrOut.Write(p)
}

// excerpt is the start of a line for a log record: enough to recognise it, never the whole.
func excerpt(b []byte) string {
	const n = 200
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}
