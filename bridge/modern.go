package main

// The stateless era (MCP 2026-07-28) served over the child's one handshake-era session.
//
// A request of that era is a POST with no Mcp-Session-Id whose params._meta carries the
// envelope (protocol version, client capabilities, optionally client info and log level) and
// whose headers repeat the version and the method. The bridge checks the envelope the way the
// official SDK's server does (mcp 2.3.0 mcp/shared/inbound.py classify_inbound_request), then:
// - server/discover is answered from the child's InitializeResult;
// - subscriptions/listen opens an event stream fed by the child's list_changed and
//   resources/updated notifications, filtered as the client asked;
// - the handshake-only methods (initialize, ping, logging/setLevel, resources/subscribe,
//   resources/unsubscribe) are -32601: that era removed them;
// - everything else goes to the child under a bridge id with the envelope's keys taken out of
//   _meta (they describe the client's era, not the child's session), and its result comes back
//   with what the era requires (resultType; cacheScope and ttlMs on the cacheable methods, both
//   "do not share, do not keep": the child's lists may change under any client).
// Closing the response stream is that era's cancellation: the child gets notifications/cancelled.

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
)

const (
	headerMethod = "Mcp-Method"
	headerName   = "Mcp-Name"

	metaClientCapsKey     = "io.modelcontextprotocol/clientCapabilities"
	metaServerInfoKey     = "io.modelcontextprotocol/serverInfo"
	metaSubscriptionIDKey = "io.modelcontextprotocol/subscriptionId"
	reservedMetaPrefix    = "io.modelcontextprotocol/"

	codeHeaderMismatch = -32020 // MCP 2026-07-28: HEADER_MISMATCH

	// How many resource URIs the bridge subscribes the child to for listen streams, in all: each
	// is a subscription the child keeps for the bridge's life.
	maxSubscribedURIs = 1024
)

// Methods the 2026-07-28 era removed: answered -32601 as the SDK's server does.
var handshakeOnlyMethods = map[string]bool{
	"initialize": true, "ping": true, "logging/setLevel": true,
	"resources/subscribe": true, "resources/unsubscribe": true,
}

// Methods whose 2026-07-28 results carry cacheScope and ttlMs (mcp_types.methods.CacheableMethod).
var cacheableMethods = map[string]bool{
	"prompts/list": true, "resources/list": true, "resources/read": true,
	"resources/templates/list": true, "server/discover": true, "tools/list": true,
}

// Methods whose name-bearing param the Mcp-Name header repeats.
var nameBearingParams = map[string]string{"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}

// errorStatus is the HTTP status of a JSON-RPC error code in the stateless era
// (mcp.shared.inbound.ERROR_CODE_HTTP_STATUS); other codes are 200.
func errorStatus(code int) int {
	switch code {
	case codeParseError, codeInvalidRequest, codeInvalidParams, codeHeaderMismatch, -32021, codeUnsupportedProtocol:
		return http.StatusBadRequest
	case codeMethodNotFound:
		return http.StatusNotFound
	}
	return http.StatusOK
}

// isModern says whether a POST without a session belongs to the stateless era: its
// MCP-Protocol-Version names no handshake version, or its _meta carries the envelope's version.
func isModern(req *http.Request, m Message) bool {
	if v := req.Header.Get(headerProtocol); v != "" && !contains(handshakeVersions, v) {
		return true
	}
	_, ok := requestMeta(m)[metaVersionKey]
	return ok
}

func requestMeta(m Message) map[string]json.RawMessage {
	var meta map[string]json.RawMessage
	if p := m.Params(); p != nil {
		_ = json.Unmarshal(p["_meta"], &meta)
	}
	return meta
}

type rejection struct {
	code    int
	message string
	data    any
}

// supportedVersions is what the bridge serves, both eras: a client refused a version learns
// that initialize works too.
func supportedVersions() []string {
	return append(append([]string{}, handshakeVersions...), modernVersions...)
}

// classifyModern is the envelope's ladder, first failure wins: _meta carries the version and
// the client capabilities (-32602); the headers repeat the version, the method and the name
// (-32020); the version is one the bridge serves (-32022). Returns the version.
func classifyModern(req *http.Request, m Message) (string, *rejection) {
	meta := requestMeta(m)
	if meta == nil {
		return "", &rejection{codeInvalidParams, "baton-bridge: params._meta must be an object carrying " +
			metaVersionKey + " and " + metaClientCapsKey, nil}
	}
	var missing []string
	for _, k := range []string{metaVersionKey, metaClientCapsKey} {
		if _, ok := meta[k]; !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return "", &rejection{codeInvalidParams, "baton-bridge: params._meta is missing " + strings.Join(missing, ", "), nil}
	}
	var version string
	versionIsString := json.Unmarshal(meta[metaVersionKey], &version) == nil
	if hv := req.Header.Values(headerProtocol); len(hv) != 1 || !versionIsString || hv[0] != version {
		return "", &rejection{codeHeaderMismatch, "baton-bridge: the MCP-Protocol-Version header does not match params._meta's " + metaVersionKey, nil}
	}
	if hm := req.Header.Values(headerMethod); len(hm) != 1 || hm[0] != m.Method() {
		return "", &rejection{codeHeaderMismatch, "baton-bridge: the Mcp-Method header does not match the request's method", nil}
	}
	if key, ok := nameBearingParams[m.Method()]; ok {
		var want string
		if json.Unmarshal(m.Params()[key], &want) == nil && want != "" {
			got, ok := decodeHeaderValue(req.Header.Get(headerName))
			if len(req.Header.Values(headerName)) > 1 || !ok || got != want {
				return "", &rejection{codeHeaderMismatch, "baton-bridge: the Mcp-Name header does not match the request's " + key, nil}
			}
		}
	}
	if !contains(modernVersions, version) {
		return "", &rejection{codeUnsupportedProtocol, "baton-bridge: unsupported protocol version " + version,
			map[string]any{"supported": supportedVersions(), "requested": version}}
	}
	return version, nil
}

// decodeHeaderValue undoes the =?base64?...?= wrapping a client uses for a value that is not
// plain header text (mcp.shared.inbound.decode_header_value).
func decodeHeaderValue(v string) (string, bool) {
	if !strings.HasPrefix(v, "=?base64?") || !strings.HasSuffix(v, "?=") || len(v) < len("=?base64??=") {
		return v, true
	}
	b, err := base64.StdEncoding.Strict().DecodeString(v[len("=?base64?") : len(v)-len("?=")])
	if err != nil {
		return "", false
	}
	return string(b), true
}

func (sv *Server) writeRejection(w http.ResponseWriter, id json.RawMessage, rej *rejection) {
	writeJSON(w, errorStatus(rej.code), ErrorResponse(id, rej.code, rej.message, rej.data))
}

// modern serves one POST of the stateless era.
func (sv *Server) modern(w http.ResponseWriter, req *http.Request, m Message, kind Kind) {
	switch kind {
	case KindNotification:
		// That era defines no client-to-server notification over HTTP (a client cancels by
		// closing its stream): acknowledged and dropped, as the SDK's server does, unless the
		// version it names is not served.
		if v := req.Header.Get(headerProtocol); v != "" && !contains(modernVersions, v) {
			sv.writeRejection(w, nil, &rejection{codeUnsupportedProtocol, "baton-bridge: unsupported protocol version " + v,
				map[string]any{"supported": supportedVersions(), "requested": v}})
			return
		}
		w.WriteHeader(http.StatusAccepted)
		return
	case KindResponse:
		writeJSON(w, http.StatusBadRequest, ErrorResponse(nil, codeInvalidRequest,
			"baton-bridge: a 2026-07-28 client posts no responses (the era has no server-to-client requests)", nil))
		return
	}
	version, rej := classifyModern(req, m)
	if rej != nil {
		sv.writeRejection(w, m["id"], rej)
		return
	}
	method := m.Method()
	switch {
	case sv.router.draining.Load():
		writeJSON(w, http.StatusServiceUnavailable, ErrorResponse(m["id"], codeUnavailable, "baton-bridge: draining: no new calls", nil))
	case !sv.router.ready.Load():
		writeJSON(w, http.StatusServiceUnavailable, ErrorResponse(m["id"], codeUnavailable, "baton-bridge: the child has not answered initialize yet", nil))
	case handshakeOnlyMethods[method]:
		sv.writeRejection(w, m["id"], &rejection{codeMethodNotFound,
			"baton-bridge: " + method + " is not a method of protocol version " + version, nil})
	case method == "server/discover":
		sv.answerModern(w, req, ResultResponse(m["id"], sv.router.DiscoverResult()))
	case method == "subscriptions/listen":
		sv.listen(w, req, m)
	default:
		stripEnvelope(m)
		s := &Session{version: version, calls: map[string]int64{}}
		sv.request(w, req, s, m, exchange{stateless: true, translate: sv.router.modernAnswer(method)})
	}
}

// answerModern writes an answer of the stateless era: its error code picks the HTTP status.
func (sv *Server) answerModern(w http.ResponseWriter, req *http.Request, msg []byte) {
	if accepts(req, "application/json") || req.Header.Get("Accept") == "" {
		writeJSON(w, modernStatus(msg), msg)
		return
	}
	startSSE(w)
	writeEvent(w, msg)
}

func modernStatus(msg []byte) int {
	var resp struct {
		Error *struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(msg, &resp) == nil && resp.Error != nil {
		return errorStatus(resp.Error.Code)
	}
	return http.StatusOK
}

// stripEnvelope takes the era's reserved keys out of params._meta (the child's session is of
// another era; progressToken and any other key stay), and drops _meta when nothing is left.
func stripEnvelope(m Message) {
	p := m.Params()
	meta := requestMeta(m)
	if p == nil || meta == nil {
		return
	}
	for k := range meta {
		if strings.HasPrefix(k, reservedMetaPrefix) {
			delete(meta, k)
		}
	}
	if len(meta) == 0 {
		delete(p, "_meta")
	} else {
		b, _ := json.Marshal(meta)
		p["_meta"] = b
	}
	m.SetParams(p)
}

// DiscoverResult is the child's InitializeResult in the stateless era's words.
func (r *Router) DiscoverResult() map[string]any {
	res := map[string]any{
		"supportedVersions": modernVersions,
		"capabilities":      r.initRes["capabilities"],
		"resultType":        "complete",
		"cacheScope":        "private",
		"ttlMs":             0,
	}
	if raw, ok := r.initRes["capabilities"]; !ok || isNull(raw) {
		res["capabilities"] = map[string]any{}
	}
	if raw, ok := r.initRes["instructions"]; ok && !isNull(raw) {
		res["instructions"] = raw
	}
	if raw, ok := r.initRes["serverInfo"]; ok && !isNull(raw) {
		res["_meta"] = map[string]json.RawMessage{metaServerInfoKey: raw}
	}
	return res
}

// modernAnswer rewrites the child's answer to a stateless request: a result gets resultType
// (and cacheScope and ttlMs when the method is cacheable) unless the child set them, and the
// child's serverInfo in its _meta.
func (r *Router) modernAnswer(method string) func([]byte) []byte {
	return func(msg []byte) []byte {
		m, err := ParseMessage(msg)
		if err != nil {
			return msg
		}
		var res map[string]json.RawMessage
		if raw, ok := m["result"]; !ok || json.Unmarshal(raw, &res) != nil || res == nil {
			return msg
		}
		setDefault := func(k string, v any) {
			if _, ok := res[k]; !ok {
				b, _ := json.Marshal(v)
				res[k] = b
			}
		}
		setDefault("resultType", "complete")
		if cacheableMethods[method] {
			setDefault("cacheScope", "private")
			setDefault("ttlMs", 0)
		}
		if info, ok := r.initRes["serverInfo"]; ok {
			var meta map[string]json.RawMessage
			if raw, ok := res["_meta"]; !ok || json.Unmarshal(raw, &meta) == nil {
				if meta == nil {
					meta = map[string]json.RawMessage{}
				}
				if _, ok := meta[metaServerInfoKey]; !ok {
					meta[metaServerInfoKey] = info
				}
				b, _ := json.Marshal(meta)
				res["_meta"] = b
			}
		}
		b, _ := json.Marshal(res)
		m["result"] = b
		return m.Encode()
	}
}

// Abandon cancels a stateless call whose client closed its stream (that era's cancellation):
// the child gets notifications/cancelled and the call leaves the in-flight count. False if the
// call was answered already.
func (r *Router) Abandon(c *call, reason string) bool {
	r.mu.Lock()
	_, live := r.pending[c.id]
	if live {
		r.forgetLocked(c)
	}
	r.mu.Unlock()
	if !live {
		return false
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "notifications/cancelled",
		"params": map[string]any{"requestId": c.id, "reason": reason}})
	_ = r.write(b)
	logEvent("info", "a stateless call's client closed its stream: cancelled at the child", "id", c.id, "method", c.method)
	return true
}

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
