package main

// subscriptions/listen (MCP 2026-07-28): event streams fed by the child's list_changed and
// resources/updated notifications, each filtered as its client asked (bridge/README.md).

import (
	"encoding/json"
	"net/http"
)

// sendOwn sends the child a request of the bridge's own (not a client's: not in flight for the
// drain); its answer is logged when it is an error.
func (r *Router) sendOwn(method string, params any) error {
	r.mu.Lock()
	r.nextID++
	c := &call{id: r.nextID, method: method, answer: make(chan []byte, 1)}
	r.pending[c.id] = c
	r.mu.Unlock()
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": c.id, "method": method, "params": params})
	err := r.write(b)
	if err != nil {
		r.mu.Lock()
		r.forgetLocked(c)
		r.mu.Unlock()
	}
	return err
}

// childCapability reads one flag of the child's capabilities, e.g. ("tools", "listChanged").
func (r *Router) childCapability(group, flag string) bool {
	var caps map[string]map[string]json.RawMessage
	_ = json.Unmarshal(r.initRes["capabilities"], &caps)
	var on bool
	_ = json.Unmarshal(caps[group][flag], &on)
	return on
}

// ListenFilter is a subscriptions/listen request's notifications (and, acknowledged, the part
// the bridge honours).
type ListenFilter struct {
	ToolsListChanged      bool     `json:"toolsListChanged,omitempty"`
	PromptsListChanged    bool     `json:"promptsListChanged,omitempty"`
	ResourcesListChanged  bool     `json:"resourcesListChanged,omitempty"`
	ResourceSubscriptions []string `json:"resourceSubscriptions,omitempty"`
}

// Listener is one subscriptions/listen stream.
type Listener struct {
	id     json.RawMessage // the listen request's id: the subscription's id
	filter ListenFilter
	uris   map[string]bool
	out    *Outbox
}

func (l *Listener) wants(method string, params map[string]json.RawMessage) bool {
	switch method {
	case "notifications/tools/list_changed":
		return l.filter.ToolsListChanged
	case "notifications/prompts/list_changed":
		return l.filter.PromptsListChanged
	case "notifications/resources/list_changed":
		return l.filter.ResourcesListChanged
	case "notifications/resources/updated":
		var uri string
		_ = json.Unmarshal(params["uri"], &uri)
		return l.uris[uri]
	}
	return false // logging and anything else: not a listen stream's (see README)
}

// Listen opens a listen stream: what the child can send of what was asked is honoured; a
// resource URI is subscribed at the child the first time any stream asks for it.
func (r *Router) Listen(id json.RawMessage, asked ListenFilter) (*Listener, error) {
	honoured := ListenFilter{
		ToolsListChanged:     asked.ToolsListChanged && r.childCapability("tools", "listChanged"),
		PromptsListChanged:   asked.PromptsListChanged && r.childCapability("prompts", "listChanged"),
		ResourcesListChanged: asked.ResourcesListChanged && r.childCapability("resources", "listChanged"),
	}
	canSubscribe := r.childCapability("resources", "subscribe")
	l := &Listener{id: id, uris: map[string]bool{}, out: NewOutbox(r.bufLimit)}
	var subscribe []string
	r.mu.Lock()
	if r.draining.Load() {
		r.mu.Unlock()
		return nil, ErrDraining
	}
	for _, uri := range asked.ResourceSubscriptions {
		if !canSubscribe || l.uris[uri] {
			continue
		}
		if !r.subscribed[uri] {
			if len(r.subscribed) >= maxSubscribedURIs {
				logEvent("warning", "a listen stream asked for more resource URIs than the bridge subscribes the child to: not honoured",
					"uri", uri, "maxSubscribedURIs", maxSubscribedURIs)
				continue
			}
			r.subscribed[uri] = true
			subscribe = append(subscribe, uri)
		}
		l.uris[uri] = true
		honoured.ResourceSubscriptions = append(honoured.ResourceSubscriptions, uri)
	}
	l.filter = honoured
	r.listeners[l] = struct{}{}
	r.mu.Unlock()
	for _, uri := range subscribe {
		if err := r.sendOwn("resources/subscribe", map[string]any{"uri": uri}); err != nil {
			logEvent("warning", "subscribing the child to a resource failed", "uri", uri, "error", err.Error())
		}
	}
	return l, nil
}

func (r *Router) Unlisten(l *Listener) {
	r.mu.Lock()
	delete(r.listeners, l)
	r.mu.Unlock()
	l.out.Close()
}

// toListeners pushes a child's notification to every listen stream that asked for it, with the
// subscription's id in its _meta; true if any did.
func (r *Router) toListeners(m Message) bool {
	method, params := m.Method(), m.Params()
	r.mu.Lock()
	var to []*Listener
	for l := range r.listeners {
		if l.wants(method, params) {
			to = append(to, l)
		}
	}
	r.mu.Unlock()
	for _, l := range to {
		n := Message{"jsonrpc": m["jsonrpc"], "method": m["method"]}
		p := map[string]json.RawMessage{}
		for k, v := range params {
			p[k] = v
		}
		var meta map[string]json.RawMessage
		_ = json.Unmarshal(p["_meta"], &meta)
		if meta == nil {
			meta = map[string]json.RawMessage{}
		}
		meta[metaSubscriptionIDKey] = l.id
		p["_meta"], _ = json.Marshal(meta)
		n.SetParams(p)
		if !l.out.Push(n.Encode()) {
			logEvent("warning", "a listen stream is past its buffer bound: ended", "subscriptionId", string(l.id), "method", method)
		}
	}
	return len(to) > 0
}

// EndListeners ends every listen stream gracefully (admission stopped: the drain, or the child
// gone): each gets the listen request's result, the era's "this subscription has ended".
func (r *Router) EndListeners() {
	r.mu.Lock()
	ls := make([]*Listener, 0, len(r.listeners))
	for l := range r.listeners {
		ls = append(ls, l)
	}
	r.mu.Unlock()
	for _, l := range ls {
		l.out.Push(listenEnd(l.id))
		l.out.Close()
	}
}

func listenEnd(id json.RawMessage) []byte {
	return ResultResponse(id, map[string]any{"resultType": "complete",
		"_meta": map[string]json.RawMessage{metaSubscriptionIDKey: id}})
}

// listen serves subscriptions/listen: an SSE stream whose first event acknowledges what is
// honoured; it ends when the client leaves, past the client's buffer bound, or gracefully at
// the drain (EndListeners).
func (sv *Server) listen(w http.ResponseWriter, req *http.Request, m Message) {
	if !accepts(req, "text/event-stream") {
		http.Error(w, "subscriptions/listen needs Accept: text/event-stream", http.StatusNotAcceptable)
		return
	}
	var params struct {
		Notifications ListenFilter `json:"notifications"`
	}
	if raw, ok := m["params"]; ok {
		if err := json.Unmarshal(raw, &params); err != nil {
			sv.writeRejection(w, m["id"], &rejection{codeInvalidParams, "baton-bridge: params.notifications: " + err.Error(), nil})
			return
		}
	}
	l, err := sv.router.Listen(m["id"], params.Notifications)
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, ErrorResponse(m["id"], codeUnavailable, "baton-bridge: draining: no new subscriptions", nil))
		return
	}
	defer sv.router.Unlisten(l)
	ack, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
		"params": map[string]any{"notifications": l.filter, "_meta": map[string]json.RawMessage{metaSubscriptionIDKey: l.id}}})
	startSSE(w)
	defer cutOnOverrun(w, l.out)()
	if !writeEvent(w, ack) {
		return
	}
	for {
		select {
		case <-l.out.Ready():
			msgs, closed, overrun := l.out.Take()
			for _, msg := range msgs {
				if !writeEvent(w, msg) {
					return
				}
			}
			if overrun {
				logEvent("warning", "a client reads its listen stream slower than the child writes: past --client-buffer-bytes, the stream is ended",
					"subscriptionId", string(l.id), "clientBufferBytes", sv.router.bufLimit)
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
