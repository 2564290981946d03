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
