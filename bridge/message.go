package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
)

// A JSON-RPC message, top level only: the bridge rewrites ids and progress tokens and leaves
// everything else as the sender wrote it (raw JSON).
type Message map[string]json.RawMessage

// Kind says what a message is by its members (JSON-RPC 2.0 section 4-5).
type Kind int

const (
	KindInvalid Kind = iota
	KindRequest
	KindNotification
	KindResponse
)

func ParseMessage(data []byte) (Message, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return nil, errors.New("not a JSON object")
	}
	var m Message
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	return m, nil
}

func (m Message) Kind() Kind {
	_, hasMethod := m["method"]
	id, hasID := m["id"]
	hasID = hasID && !isNull(id)
	_, hasResult := m["result"]
	_, hasError := m["error"]
	switch {
	case hasMethod && hasID:
		return KindRequest
	case hasMethod:
		return KindNotification
	case hasResult || hasError:
		return KindResponse
	}
	return KindInvalid
}

func (m Message) Method() string {
	var s string
	_ = json.Unmarshal(m["method"], &s)
	return s
}

func (m Message) Encode() []byte {
	b, err := json.Marshal(map[string]json.RawMessage(m))
	if err != nil {
		// Every member is RawMessage that came out of Unmarshal or our own Marshal.
		panic(err)
	}
	return b
}

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(bytes.TrimSpace(raw)) == "null"
}

// BridgeID parses an id the bridge gave the child (a JSON integer); ok is false for anything
// else (the child answering an id it was never sent).
func BridgeID(raw json.RawMessage) (int64, bool) {
	n, err := strconv.ParseInt(string(bytes.TrimSpace(raw)), 10, 64)
	return n, err == nil
}

// IDKey is a map key for a client's id: its canonical JSON text (1 and "1" differ, as they do
// for JSON-RPC).
func IDKey(raw json.RawMessage) string {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return string(raw)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// Params returns the params object's members (nil when absent or not an object).
func (m Message) Params() map[string]json.RawMessage {
	var p map[string]json.RawMessage
	if raw, ok := m["params"]; ok {
		_ = json.Unmarshal(raw, &p)
	}
	return p
}

func (m Message) SetParams(p map[string]json.RawMessage) {
	b, _ := json.Marshal(p)
	m["params"] = b
}

// ProgressToken returns params._meta.progressToken, if there is one.
func (m Message) ProgressToken() (json.RawMessage, bool) {
	p := m.Params()
	var meta map[string]json.RawMessage
	if p == nil || json.Unmarshal(p["_meta"], &meta) != nil {
		return nil, false
	}
	tok, ok := meta["progressToken"]
	if !ok || isNull(tok) {
		return nil, false
	}
	return tok, true
}

// ReplaceProgressToken sets params._meta.progressToken (which must exist).
func (m Message) ReplaceProgressToken(tok json.RawMessage) {
	p := m.Params()
	var meta map[string]json.RawMessage
	_ = json.Unmarshal(p["_meta"], &meta)
	meta["progressToken"] = tok
	b, _ := json.Marshal(meta)
	p["_meta"] = b
	m.SetParams(p)
}

// ReplaceParam sets one member of params (which must be an object).
func (m Message) ReplaceParam(name string, value json.RawMessage) {
	p := m.Params()
	p[name] = value
	m.SetParams(p)
}

func jsonInt(n int64) json.RawMessage {
	return json.RawMessage(strconv.FormatInt(n, 10))
}

func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

// ErrorResponse is a JSON-RPC error answer to id (null when the id is unknown).
func ErrorResponse(id json.RawMessage, code int, message string, data any) []byte {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	e := map[string]any{"code": code, "message": message}
	if data != nil {
		e["data"] = data
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "error": e})
	return b
}

func ResultResponse(id json.RawMessage, result any) []byte {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "result": result})
	return b
}

// JSON-RPC and MCP error codes the bridge answers with.
const (
	codeParseError          = -32700
	codeInvalidRequest      = -32600
	codeMethodNotFound      = -32601
	codeInvalidParams       = -32602
	codeInternalError       = -32603
	codeUnsupportedProtocol = -32022 // MCP 2026-07-28: UNSUPPORTED_PROTOCOL_VERSION
	codeUnavailable         = -32000 // implementation-defined server error: draining, child gone
	codeRequestCancelled    = -32800 // the code LSP gives a cancelled request; MCP defines none
)
