package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

const (
	headerSession  = "Mcp-Session-Id"
	headerProtocol = "Mcp-Protocol-Version"
	metaVersionKey = "io.modelcontextprotocol/protocolVersion"
)

// Server is the HTTP side: MCP streamable HTTP on path, /baton/ready and /baton/drain.
type Server struct {
	router  *Router
	path    string
	maxBody int64
}

func (sv *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/baton/ready", sv.ready)
	mux.HandleFunc("/baton/drain", sv.drain)
	mux.HandleFunc(sv.path, sv.mcp)
	return mux
}

func (sv *Server) ready(w http.ResponseWriter, _ *http.Request) {
	switch {
	case sv.router.draining.Load():
		http.Error(w, "draining", http.StatusServiceUnavailable)
	case sv.router.ready.Load():
		_, _ = io.WriteString(w, "ready\n")
	default:
		http.Error(w, "the child has not answered initialize yet", http.StatusServiceUnavailable)
	}
}

func (sv *Server) drain(w http.ResponseWriter, _ *http.Request) {
	n := sv.router.Inflight()
	w.Header().Set("Content-Type", "application/json")
	if n > 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_, _ = fmt.Fprintf(w, "{\"inflight\":%d}\n", n)
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func (sv *Server) mcp(w http.ResponseWriter, req *http.Request) {
	switch req.Method {
	case http.MethodPost:
		sv.post(w, req)
	case http.MethodGet:
		sv.get(w, req)
	case http.MethodDelete:
		sv.delete(w, req)
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

func newSessionID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// session finds the request's session: nil after answering 400 (no header) or 404 (unknown:
// the client must initialize again, the spec's rule).
func (sv *Server) session(w http.ResponseWriter, req *http.Request) *Session {
	id := req.Header.Get(headerSession)
	if id == "" {
		writeJSON(w, http.StatusBadRequest, ErrorResponse(nil, codeInvalidRequest, "baton-bridge: Mcp-Session-Id header required (initialize first)", nil))
		return nil
	}
	s := sv.router.Session(id)
	if s == nil {
		writeJSON(w, http.StatusNotFound, ErrorResponse(nil, codeInvalidRequest, "baton-bridge: unknown session", nil))
	}
	return s
}

func accepts(req *http.Request, mediaType string) bool {
	for _, part := range strings.Split(req.Header.Get("Accept"), ",") {
		t := strings.TrimSpace(strings.SplitN(part, ";", 2)[0])
		if strings.EqualFold(t, mediaType) || t == "*/*" {
			return true
		}
	}
	return false
}

func (sv *Server) post(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, sv.maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeJSON(w, http.StatusRequestEntityTooLarge, ErrorResponse(nil, codeInvalidRequest,
				fmt.Sprintf("baton-bridge: body longer than --max-line-bytes (%d)", sv.maxBody), nil))
			return
		}
		http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
		return
	}
	if trimmed := strings.TrimSpace(string(body)); strings.HasPrefix(trimmed, "[") {
		writeJSON(w, http.StatusBadRequest, ErrorResponse(nil, codeInvalidRequest, "baton-bridge: JSON-RPC batches are not supported", nil))
		return
	}
	m, err := ParseMessage(body)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, ErrorResponse(nil, codeParseError, "baton-bridge: parse error: "+err.Error(), nil))
		return
	}
	kind := m.Kind()
	if kind == KindInvalid {
		writeJSON(w, http.StatusBadRequest, ErrorResponse(m["id"], codeInvalidRequest, "baton-bridge: not a JSON-RPC request, notification or response", nil))
		return
	}
	if req.Header.Get(headerSession) == "" && m.Method() != "initialize" && isModern(req, m) {
		sv.modern(w, req, m, kind)
		return
	}
	if kind == KindRequest && m.Method() == "initialize" {
		sv.initialize(w, req, m)
		return
	}
	s := sv.session(w, req)
	if s == nil {
		return
	}
	switch kind {
	case KindResponse:
		// Answers to server-to-client requests: the bridge never forwards those (see fromChildRequest).
		logEvent("info", "a client posted a response; the bridge sends no server-to-client requests: dropped", "session", s.id)
		w.WriteHeader(http.StatusAccepted)
	case KindNotification:
		switch m.Method() {
		case "notifications/initialized":
			// The child had its own from the bridge.
		case "notifications/cancelled":
			if !sv.router.Cancel(s, m) {
				logEvent("info", "a cancellation for no call of this client in flight: dropped", "session", s.id)
			}
		default:
			_ = sv.router.write(m.Encode())
		}
		w.WriteHeader(http.StatusAccepted)
	case KindRequest:
		sv.request(w, req, s, m, exchange{})
	}
}

func (sv *Server) initialize(w http.ResponseWriter, req *http.Request, m Message) {
	if sv.router.draining.Load() {
		writeJSON(w, http.StatusServiceUnavailable, ErrorResponse(m["id"], codeUnavailable, "baton-bridge: draining: no new sessions", nil))
		return
	}
	if !sv.router.ready.Load() {
		writeJSON(w, http.StatusServiceUnavailable, ErrorResponse(m["id"], codeUnavailable, "baton-bridge: the child has not answered initialize yet", nil))
		return
	}
	var params struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	_ = json.Unmarshal(m["params"], &params)
	result, version := sv.router.InitializeResult(params.ProtocolVersion)
	id := newSessionID()
	sv.router.NewSession(id, version)
	w.Header().Set(headerSession, id)
	sv.answer(w, req, ResultResponse(m["id"], result))
}

// answer writes one JSON-RPC message as the POST's answer: JSON if the client accepts it, else
// one SSE event.
func (sv *Server) answer(w http.ResponseWriter, req *http.Request, msg []byte) {
	if accepts(req, "application/json") || req.Header.Get("Accept") == "" {
		writeJSON(w, http.StatusOK, msg)
		return
	}
	startSSE(w)
	writeEvent(w, msg)
}

func startSSE(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache, no-transform")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// cutOnOverrun ends a write to w that is blocked once o overruns: a client that never reads its
// stream would otherwise hold its writer in that write for good, and the overrun would never be
// seen. The returned stop must be called before the handler returns.
func cutOnOverrun(w http.ResponseWriter, o *Outbox) (stop func()) {
	var mu sync.Mutex
	done := make(chan struct{})
	finished := false
	go func() {
		select {
		case <-o.Overrun():
			mu.Lock()
			defer mu.Unlock()
			if !finished {
				_ = http.NewResponseController(w).SetWriteDeadline(time.Now())
			}
		case <-done:
		}
	}()
	return func() {
		mu.Lock()
		finished = true
		mu.Unlock()
		close(done)
	}
}

func writeEvent(w http.ResponseWriter, msg []byte) bool {
	if _, err := fmt.Fprintf(w, "event: message\ndata: %s\n\n", msg); err != nil {
		return false
	}
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	return true
}

// exchange is how one forwarded call's POST behaves in its era.
type exchange struct {
	// stateless (2026-07-28): closing the stream cancels the call at the child; an error answer
	// picks the HTTP status. Handshake era: a client that leaves leaves its call in flight.
	stateless bool
	translate func([]byte) []byte // the answer rewritten for the era (nil: as the child wrote it)
}

func (sv *Server) request(w http.ResponseWriter, req *http.Request, s *Session, m Message, ex exchange) {
	if m.Method() == "ping" && !ex.stateless {
		sv.answer(w, req, ResultResponse(m["id"], map[string]any{}))
		return
	}
	useJSON := accepts(req, "application/json") || req.Header.Get("Accept") == ""
	// A call that asks for progress is answered on its own SSE stream when the client accepts
	// one, so its progress travels with it: the session's GET stream may be gone (the gateway
	// ends quiet GET streams at a handoff's seal while the call drains).
	if _, wantsProgress := m.ProgressToken(); wantsProgress && accepts(req, "text/event-stream") {
		useJSON = false
	}
	var notes *Outbox
	if !useJSON {
		notes = NewOutbox(sv.router.bufLimit)
	}
	c, err := sv.router.Forward(s, m, notes)
	if errors.Is(err, ErrDraining) {
		writeJSON(w, http.StatusServiceUnavailable, ErrorResponse(m["id"], codeUnavailable, "baton-bridge: draining: no new calls", nil))
		return
	}
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, ErrorResponse(m["id"], codeUnavailable, "baton-bridge: writing to the child failed: "+err.Error(), nil))
		return
	}
	if ex.stateless {
		// Whatever ends this POST before the answer (the client closing its stream, a stream
		// past its bound) is that era's cancellation.
		defer sv.router.Abandon(c, "the client closed its response stream")
	}
	if ex.translate == nil {
		ex.translate = func(msg []byte) []byte { return msg }
	}
	if useJSON {
		select {
		case msg := <-c.answer:
			msg = ex.translate(msg)
			status := http.StatusOK
			if ex.stateless {
				status = modernStatus(msg)
			}
			writeJSON(w, status, msg)
		case <-req.Context().Done():
			// Handshake era: the client left; the call stays in flight until the child
			// answers (the drain counts it) and its answer is dropped.
		}
		return
	}
	startSSE(w)
	defer cutOnOverrun(w, notes)()
	for {
		select {
		case msg := <-c.answer:
			sv.flushNotes(w, notes, s)
			writeEvent(w, ex.translate(msg))
			notes.Close()
			return
		case <-notes.Ready():
			if !sv.flushNotes(w, notes, s) {
				// Past the bound: the stream ends; the call is still in flight (its answer dropped).
				return
			}
		case <-req.Context().Done():
			notes.Close()
			return
		}
	}
}

func (sv *Server) flushNotes(w http.ResponseWriter, o *Outbox, s *Session) bool {
	msgs, _, overrun := o.Take()
	for _, msg := range msgs {
		if !writeEvent(w, msg) {
			overrun = o.Overran() // a write cut by cutOnOverrun
			break
		}
	}
	if overrun {
		logEvent("warning", "a client reads its stream slower than the child writes: past --client-buffer-bytes, its stream is ended",
			"session", s.id, "clientBufferBytes", sv.router.bufLimit)
		return false
	}
	return true
}

func (sv *Server) get(w http.ResponseWriter, req *http.Request) {
	if !accepts(req, "text/event-stream") {
		http.Error(w, "GET needs Accept: text/event-stream", http.StatusNotAcceptable)
		return
	}
	s := sv.session(w, req)
	if s == nil {
		return
	}
	out, ok := sv.router.OpenGet(s)
	if !ok {
		http.Error(w, "a GET stream is already open for this session", http.StatusConflict)
		return
	}
	defer sv.router.CloseGet(s, out)
	startSSE(w)
	defer cutOnOverrun(w, out)()
	for {
		select {
		case <-out.Ready():
			msgs, closed, overrun := out.Take()
			for _, msg := range msgs {
				if !writeEvent(w, msg) {
					if overrun = out.Overran(); !overrun { // else a write cut by cutOnOverrun
						return
					}
					break
				}
			}
			if overrun {
				logEvent("warning", "a client reads its GET stream slower than the child writes: past --client-buffer-bytes, the stream is ended",
					"session", s.id, "clientBufferBytes", sv.router.bufLimit)
				return
			}
			if closed {
				return
			}
		case <-req.Context().Done():
			return
		}
	}
}

func (sv *Server) delete(w http.ResponseWriter, req *http.Request) {
	s := sv.session(w, req)
	if s == nil {
		return
	}
	sv.router.EndSession(s.id)
	w.WriteHeader(http.StatusOK)
}
