package main

import (
	"bytes"
	"sync"
)

// TailRing keeps the last bytes written to it (at most limit), cut at a line start when it can
// be: the stderr tail the termination log carries. Safe for concurrent use.
type TailRing struct {
	mu    sync.Mutex
	limit int
	buf   []byte
}

func NewTailRing(limit int) *TailRing {
	return &TailRing{limit: limit, buf: make([]byte, 0, limit)}
}

func (t *TailRing) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if len(p) >= t.limit {
		p = p[len(p)-t.limit:]
		t.buf = t.buf[:0]
	}
	if over := len(t.buf) + len(p) - t.limit; over > 0 {
		// Shift left in place: the buffer never grows past limit.
		copy(t.buf, t.buf[over:])
		t.buf = t.buf[:len(t.buf)-over]
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

// Tail returns the kept bytes, starting after the first newline when the ring has cut a line
// in two (a whole line is more useful than its end), and without trailing newlines.
func (t *TailRing) Tail() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := t.buf
	if len(out) == t.limit {
		if i := bytes.IndexByte(out, '\n'); i >= 0 && i < len(out)-1 {
			out = out[i+1:]
		}
	}
	return string(bytes.TrimRight(out, "\n"))
}

// TerminationMessage is the text of the termination log: the reason, then the stderr tail, in
// at most limit bytes all told (the kubelet keeps 4096). The tail is cut from its front, so the
// last lines (the ones that say why) are the ones kept.
func TerminationMessage(reason, stderrTail string, limit int) string {
	head := reason + "; stderr: "
	if len(head) >= limit {
		return head[:limit]
	}
	room := limit - len(head)
	if len(stderrTail) > room {
		stderrTail = stderrTail[len(stderrTail)-room:]
	}
	return head + stderrTail
}
