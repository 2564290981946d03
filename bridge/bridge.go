package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
)

// The protocol versions of the initialize handshake era, oldest first (the official SDKs:
// Python mcp 2.3.0 mcp_types.version.HANDSHAKE_PROTOCOL_VERSIONS, TypeScript 1.32.2
// SUPPORTED_PROTOCOL_VERSIONS). The bridge offers the newest to the child.
var handshakeVersions = []string{"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"}

// The stateless era (no initialize; a per-request _meta envelope, server/discover,
// subscriptions/listen). The child speaks one handshake-era session over stdio; the bridge
// serves this era on top of it (modern.go): discover answered from the child's InitializeResult,
// each request forwarded on the child's one session with the envelope's keys taken out.
var modernVersions = []string{"2026-07-28"}

const latestHandshakeVersion = "2025-11-25"

const bridgeVersion = "0.1.0"

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// call is one request sent to the child and not answered yet (in flight).
type call struct {
	id          int64
	method      string
	session     *Session // nil: the bridge's own initialize
	clientID    json.RawMessage
	clientToken json.RawMessage // the client's progressToken, if any
	tokenKey    string          // the bridge's progressToken for it ("" if none)
	answer      chan []byte     // the response, rewritten to the client's id (capacity 1)
	notes       *Outbox         // the POST's SSE stream for progress; nil: the session's GET stream
}

// Session is one client of the handshake era (one Mcp-Session-Id), or one request of the
// stateless era (id "", never in Router.sessions: it lives as long as its POST).
type Session struct {
	id      string
	version string
	get     *Outbox          // the open GET stream, if any
	calls   map[string]int64 // the client's id (IDKey) -> the bridge's id, for cancellations
}

// Router owns the remapping between clients and the one child. All maps behind mu.
type Router struct {
	mu       sync.Mutex
	nextID   int64
	pending  map[int64]*call
	tokens   map[string]*call // the bridge's progressToken (its JSON text) -> call
	sessions map[string]*Session
	// The stateless era's subscriptions/listen streams, and the resource URIs the bridge has
	// subscribed the child to for them (never unsubscribed: a handshake client may share one).
	listeners  map[*Listener]struct{}
	subscribed map[string]bool

	write     func([]byte) error // one line to the child's stdin
	bufLimit  int
	initID    int64
	initDone  chan struct{}
	initErr   error
	initRes   map[string]json.RawMessage
	childVer  string
	ready     atomic.Bool
	draining  atomic.Bool
	dropCount atomic.Int64
}

func NewRouter(write func([]byte) error, bufLimit int) *Router {
	return &Router{
		pending:    map[int64]*call{},
		tokens:     map[string]*call{},
		sessions:   map[string]*Session{},
		listeners:  map[*Listener]struct{}{},
		subscribed: map[string]bool{},
		write:      write,
		bufLimit:   bufLimit,
		initDone:   make(chan struct{}),
	}
}

// Inflight counts the clients' requests sent to the child and not answered (not the bridge's
// own: its initialize, the resources/subscribe it sends for a listen stream).
func (r *Router) Inflight() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.pending {
		if c.session != nil {
			n++
		}
	}
	return n
}

// CutCall names a call in flight, for the drain's log line and termination log.
type CutCall struct {
	ID       int64           `json:"id"`
	Method   string          `json:"method"`
	Session  string          `json:"session,omitempty"` // "" for a stateless (2026-07-28) call
	ClientID json.RawMessage `json:"clientId"`
}

func (r *Router) InflightCalls() []CutCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []CutCall
	for _, c := range r.pending {
		if c.session == nil {
			continue
		}
		out = append(out, CutCall{ID: c.id, Method: c.method, Session: c.session.id, ClientID: c.clientID})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// SendInitialize sends the bridge's own initialize: no client capabilities (so a child has no
// reason to send sampling, roots or elicitation requests), the newest handshake version.
func (r *Router) SendInitialize() error {
	r.mu.Lock()
	r.nextID++
	c := &call{id: r.nextID, method: "initialize", answer: make(chan []byte, 1)}
	r.initID = c.id
	r.pending[c.id] = c
	r.mu.Unlock()
	params := map[string]any{
		"protocolVersion": latestHandshakeVersion,
		"capabilities":    map[string]any{},
		"clientInfo":      map[string]any{"name": "baton-bridge", "version": bridgeVersion},
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": c.id, "method": "initialize", "params": params})
	return r.write(b)
}

func (r *Router) finishInit(resp Message) {
	defer close(r.initDone)
	if errRaw, ok := resp["error"]; ok {
		r.initErr = fmt.Errorf("the child answered initialize with an error: %s", excerpt(errRaw))
		return
	}
	var res map[string]json.RawMessage
	if err := json.Unmarshal(resp["result"], &res); err != nil {
		r.initErr = fmt.Errorf("the child's initialize result is not an object: %v", err)
		return
	}
	var ver string
	_ = json.Unmarshal(res["protocolVersion"], &ver)
	if ver == "" {
		r.initErr = errors.New("the child's initialize result has no protocolVersion")
		return
	}
	r.initRes, r.childVer = res, ver
	if err := r.write([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)); err != nil {
		r.initErr = fmt.Errorf("writing notifications/initialized to the child: %v", err)
		return
	}
	r.ready.Store(true)
	logEvent("info", "the child answered initialize: ready", "protocolVersion", ver)
}

// FromChild handles one line of the child's stdout.
func (r *Router) FromChild(line []byte) {
	m, err := ParseMessage(line)
	if err != nil {
		logEvent("warning", "the child wrote a line that is not a JSON-RPC message: not forwarded",
			"error", err.Error(), "bytes", len(line), "line", excerpt(line))
		return
	}
	switch m.Kind() {
	case KindResponse:
		r.fromChildResponse(m)
	case KindRequest:
		r.fromChildRequest(m)
	case KindNotification:
		r.fromChildNotification(m)
	default:
		logEvent("warning", "the child wrote a JSON object that is not a JSON-RPC message: not forwarded",
			"line", excerpt(line))
	}
}

func (r *Router) fromChildResponse(m Message) {
	id, ok := BridgeID(m["id"])
	r.mu.Lock()
	c := r.pending[id]
	if ok && c != nil {
		r.forgetLocked(c)
	}
	r.mu.Unlock()
	if !ok || c == nil {
		logEvent("warning", "the child answered an id the bridge has not sent or already had answered: dropped",
			"id", string(m["id"]))
		return
	}
	if c.session == nil {
		if c.id == r.initID {
			r.finishInit(m)
		} else if errRaw, failed := m["error"]; failed {
			logEvent("warning", "the child answered the bridge's own request with an error", "method", c.method, "error", excerpt(errRaw))
		}
		return
	}
	m["id"] = c.clientID
	c.answer <- m.Encode()
}

// forgetLocked removes a call from every map (the response came, or the child is gone).
func (r *Router) forgetLocked(c *call) {
	delete(r.pending, c.id)
	if c.tokenKey != "" {
		delete(r.tokens, c.tokenKey)
	}
	if c.session != nil {
		key := IDKey(c.clientID)
		if r.sessions[c.session.id] == c.session && c.session.calls[key] == c.id {
			delete(c.session.calls, key)
		}
	}
}

// fromChildRequest: the bridge declared no client capabilities, so a child has no business
// asking for sampling, roots or elicitation; it gets an error (ping gets its empty result).
func (r *Router) fromChildRequest(m Message) {
	method := m.Method()
	if method == "ping" {
		_ = r.write(ResultResponse(m["id"], map[string]any{}))
		return
	}
	logEvent("warning", "the child sent a server-to-client request; the bridge declared no client capabilities and answers it with an error",
		"method", method, "id", string(m["id"]))
	_ = r.write(ErrorResponse(m["id"], codeMethodNotFound,
		"baton-bridge: server-to-client requests are not supported (the bridge declared no client capabilities): "+method, nil))
}

func (r *Router) fromChildNotification(m Message) {
	method := m.Method()
	switch method {
	case "notifications/progress":
		p := m.Params()
		r.mu.Lock()
		c := r.tokens[IDKey(p["progressToken"])]
		var dest *Outbox
		if c != nil {
			dest = c.notes
			if dest == nil {
				dest = c.session.get
			}
		}
		r.mu.Unlock()
		if c == nil {
			logEvent("debug", "progress for a token no call in flight carries: dropped", "progressToken", string(p["progressToken"]))
			return
		}
		if dest == nil {
			r.dropped("progress for a client with no stream open: dropped", c.session.id)
			return
		}
		m.ReplaceParam("progressToken", c.clientToken)
		if !dest.Push(m.Encode()) {
			logEvent("warning", "a client's stream is past its buffer bound or closed: ended; progress dropped", "session", c.session.id)
		}
	case "notifications/cancelled":
		// The child cancelling a request it sent us: the bridge never forwards those.
		return
	default:
		// list_changed, logging, resources/updated: every client's GET stream, and the listen
		// streams whose filter asks for it.
		heard := r.toListeners(m)
		b := m.Encode()
		r.mu.Lock()
		var outs []*Outbox
		var ids []string
		for _, s := range r.sessions {
			if s.get != nil {
				outs = append(outs, s.get)
				ids = append(ids, s.id)
			}
		}
		r.mu.Unlock()
		if len(outs) == 0 && !heard {
			r.dropped("a notification from the child and no client has a GET stream open: dropped", method)
			return
		}
		for i, o := range outs {
			if !o.Push(b) {
				logEvent("warning", "a client's GET stream is past its buffer bound: ended", "session", ids[i], "method", method)
			}
		}
	}
}

func (r *Router) dropped(msg, what string) {
	r.dropCount.Add(1)
	logEvent("info", msg, "what", what)
}

// ErrDraining: admission is stopped (SIGTERM).
var ErrDraining = errors.New("draining")

// Forward sends a client's request to the child under a bridge id; the call's answer channel
// gets the response with the client's id back.
func (r *Router) Forward(s *Session, m Message, notes *Outbox) (*call, error) {
	r.mu.Lock()
	if r.draining.Load() {
		r.mu.Unlock()
		return nil, ErrDraining
	}
	r.nextID++
	c := &call{id: r.nextID, method: m.Method(), session: s, clientID: m["id"], answer: make(chan []byte, 1), notes: notes}
	if tok, ok := m.ProgressToken(); ok {
		c.clientToken = tok
		c.tokenKey = IDKey(jsonString("baton-" + strconv.FormatInt(c.id, 10)))
		r.tokens[c.tokenKey] = c
		m.ReplaceProgressToken(json.RawMessage(c.tokenKey))
	}
	r.pending[c.id] = c
	s.calls[IDKey(c.clientID)] = c.id
	m["id"] = jsonInt(c.id)
	r.mu.Unlock()
	if err := r.write(m.Encode()); err != nil {
		r.mu.Lock()
		r.forgetLocked(c)
		r.mu.Unlock()
		return nil, err
	}
	return c, nil
}

// Cancel forwards a client's notifications/cancelled with the request id remapped to the
// bridge's; false if the id is not one of this client's calls in flight (then it is dropped).
// The spec has the receiver send no response to a cancelled request, so the call leaves the
// in-flight count here (a drain never waits for an answer that will not come), and its POST is
// answered with an error; an answer the child sends anyway is dropped with a log line.
func (r *Router) Cancel(s *Session, m Message) bool {
	p := m.Params()
	if p == nil {
		return false
	}
	r.mu.Lock()
	id, ok := s.calls[IDKey(p["requestId"])]
	c := r.pending[id]
	if ok && c != nil {
		r.forgetLocked(c)
	}
	r.mu.Unlock()
	if !ok || c == nil {
		return false
	}
	m.ReplaceParam("requestId", jsonInt(id))
	err := r.write(m.Encode())
	c.answer <- ErrorResponse(c.clientID, codeRequestCancelled, "baton-bridge: request cancelled by the client", nil)
	return err == nil
}

// FailAll answers every call in flight with an error (the child is gone).
func (r *Router) FailAll(reason string) {
	r.mu.Lock()
	calls := make([]*call, 0, len(r.pending))
	for _, c := range r.pending {
		calls = append(calls, c)
	}
	for _, c := range calls {
		r.forgetLocked(c)
	}
	r.mu.Unlock()
	for _, c := range calls {
		if c.session != nil {
			c.answer <- ErrorResponse(c.clientID, codeUnavailable, "baton-bridge: "+reason, nil)
		}
	}
}

func (r *Router) NewSession(id, version string) *Session {
	s := &Session{id: id, version: version, calls: map[string]int64{}}
	r.mu.Lock()
	r.sessions[id] = s
	r.mu.Unlock()
	return s
}

func (r *Router) Session(id string) *Session {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sessions[id]
}

// EndSession (DELETE): its GET stream ends; answers to its calls still in flight are dropped
// when they come (the calls still count as in flight until then).
func (r *Router) EndSession(id string) bool {
	r.mu.Lock()
	s := r.sessions[id]
	delete(r.sessions, id)
	var get *Outbox
	if s != nil {
		get, s.get = s.get, nil
	}
	r.mu.Unlock()
	if get != nil {
		get.Close()
	}
	return s != nil
}

// OpenGet attaches a GET stream to a session; false if one is open already.
func (r *Router) OpenGet(s *Session) (*Outbox, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s.get != nil {
		return nil, false
	}
	s.get = NewOutbox(r.bufLimit)
	return s.get, true
}

func (r *Router) CloseGet(s *Session, o *Outbox) {
	r.mu.Lock()
	if s.get == o {
		s.get = nil
	}
	r.mu.Unlock()
	o.Close()
}

// InitializeResult is the child's cached InitializeResult with the version negotiated for one
// client: the client's own if the bridge knows it (the spec's rule), else the child's.
func (r *Router) InitializeResult(requested string) (map[string]json.RawMessage, string) {
	version := r.childVer
	if contains(handshakeVersions, requested) {
		version = requested
	}
	res := make(map[string]json.RawMessage, len(r.initRes))
	for k, v := range r.initRes {
		res[k] = v
	}
	res["protocolVersion"] = jsonString(version)
	return res, version
}

// ReadChild reads the child's stdout until EOF, one message per line, with the line bound.
func (r *Router) ReadChild(stdout io.Reader, maxLine int) {
	lr := NewLineReader(stdout, maxLine)
	for {
		line, err := lr.Next()
		var tooLong *ErrLineTooLong
		switch {
		case errors.As(err, &tooLong):
			logEvent("warning", "the child wrote a line longer than --max-line-bytes: dropped, resynchronised at the next newline",
				"bytes", tooLong.Bytes, "maxLineBytes", maxLine)
			continue
		case err != nil:
			if !errors.Is(err, io.EOF) {
				logEvent("warning", "reading the child's stdout failed", "error", err.Error())
			}
			return
		}
		if len(line) == 0 {
			continue
		}
		r.FromChild(line)
	}
}
