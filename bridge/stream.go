package main

import "sync"

// Outbox is one client stream's queue (a GET stream, or a POST's answer): bounded in bytes so a
// client that reads slower than the child writes costs at most limit bytes, after which its
// stream is ended (Push returns false) and never grows the bridge's memory. Push never blocks:
// the child's stdout reader must never wait on one client.
type Outbox struct {
	mu      sync.Mutex
	queue   [][]byte
	queued  int
	limit   int
	closed  bool
	overrun bool
	ready   chan struct{} // one token: "something to read, or closed"
	over    chan struct{} // closed once the outbox overruns
}

func NewOutbox(limit int) *Outbox {
	return &Outbox{limit: limit, ready: make(chan struct{}, 1), over: make(chan struct{})}
}

// Push queues msg; false if the outbox is closed or msg would take it past its bound (then it
// is closed, overrun, and the stream's writer ends the stream).
func (o *Outbox) Push(msg []byte) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return false
	}
	// An empty outbox always takes one message (a message is bounded by --max-line-bytes), so
	// the bound is limit plus one message.
	if o.queued > 0 && o.queued+len(msg) > o.limit {
		o.closed, o.overrun = true, true
		o.queue, o.queued = nil, 0
		o.signal()
		close(o.over)
		return false
	}
	o.queue = append(o.queue, msg)
	o.queued += len(msg)
	o.signal()
	return true
}

func (o *Outbox) Close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closed = true
	o.signal()
}

func (o *Outbox) signal() {
	select {
	case o.ready <- struct{}{}:
	default:
	}
}

// Take returns what is queued (emptying the queue) and whether the outbox is closed.
func (o *Outbox) Take() (msgs [][]byte, closed bool, overrun bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	msgs, o.queue, o.queued = o.queue, nil, 0
	return msgs, o.closed, o.overrun
}

// Ready is signalled whenever Take has something new to say.
func (o *Outbox) Ready() <-chan struct{} { return o.ready }

// Overrun is closed once the outbox went past its bound: its writer may be blocked in a write the
// client never reads, and must be cut (cutOnOverrun).
func (o *Outbox) Overrun() <-chan struct{} { return o.over }

// Overran says whether the outbox went past its bound.
func (o *Outbox) Overran() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.overrun
}
