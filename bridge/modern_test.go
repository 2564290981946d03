package main

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestClassifyModernIsTheSDKsLadder(t *testing.T) {
	good := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a b","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
	headers := func(over map[string]string) map[string]string {
		h := map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "=?base64?YSBi?="}
		for k, v := range over {
			h[k] = v
		}
		return h
	}
	cases := []struct {
		name    string
		body    string
		headers map[string]string
		code    int // 0: accepted
	}{
		{"accepted (Mcp-Name base64-wrapped)", good, headers(nil), 0},
		{"plain Mcp-Name", good, headers(map[string]string{"Mcp-Name": "a b"}), 0},
		{"no _meta", `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`, headers(map[string]string{"Mcp-Method": "tools/list"}), codeInvalidParams},
		{"no capabilities", `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`,
			headers(map[string]string{"Mcp-Method": "tools/list"}), codeInvalidParams},
		{"version header differs", good, headers(map[string]string{"MCP-Protocol-Version": "2025-11-25"}), codeHeaderMismatch},
		{"method header differs", good, headers(map[string]string{"Mcp-Method": "tools/list"}), codeHeaderMismatch},
		{"name header differs", good, headers(map[string]string{"Mcp-Name": "a"}), codeHeaderMismatch},
		{"name header badly wrapped", good, headers(map[string]string{"Mcp-Name": "=?base64?!!?="}), codeHeaderMismatch},
		{"unserved version", strings.ReplaceAll(good, "2026-07-28", "2027-01-01"), headers(map[string]string{"MCP-Protocol-Version": "2027-01-01"}), codeUnsupportedProtocol},
	}
	for _, tc := range cases {
		req := httptest.NewRequest("POST", "/mcp", strings.NewReader(tc.body))
		for k, v := range tc.headers {
			req.Header.Set(k, v)
		}
		m, err := ParseMessage([]byte(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		version, rej := classifyModern(req, m)
		switch {
		case tc.code == 0 && (rej != nil || version != "2026-07-28"):
			t.Errorf("%s: want accepted, got %q %+v", tc.name, version, rej)
		case tc.code != 0 && (rej == nil || rej.code != tc.code):
			t.Errorf("%s: want code %d, got %+v", tc.name, tc.code, rej)
		}
	}
}

func TestStripEnvelopeKeepsEverythingButTheErasKeys(t *testing.T) {
	m, _ := ParseMessage([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/logLevel":"info","progressToken":7,"vendor/k":1}}}`))
	stripEnvelope(m)
	if got := string(m["params"]); got != `{"_meta":{"progressToken":7,"vendor/k":1},"name":"x"}` {
		t.Fatalf("params %s", got)
	}
	m, _ = ParseMessage([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/clientCapabilities":{}}}}`))
	stripEnvelope(m)
	if got := string(m["params"]); got != `{}` {
		t.Fatalf("params %s, want _meta dropped", got)
	}
}

func TestModernAnswerAddsWhatTheEraRequiresAndKeepsWhatTheChildSet(t *testing.T) {
	r := NewRouter(func([]byte) error { return nil }, 1024)
	r.initRes = map[string]json.RawMessage{"serverInfo": json.RawMessage(`{"name":"child","version":"1"}`)}
	got := string(r.modernAnswer("tools/list")([]byte(`{"jsonrpc":"2.0","id":"a","result":{"tools":[],"ttlMs":5000}}`)))
	want := `{"id":"a","jsonrpc":"2.0","result":{"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"child","version":"1"}},"cacheScope":"private","resultType":"complete","tools":[],"ttlMs":5000}}`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	got = string(r.modernAnswer("tools/call")([]byte(`{"jsonrpc":"2.0","id":1,"result":{"content":[],"resultType":"complete","_meta":{"k":1}}}`)))
	if strings.Contains(got, "cacheScope") || !strings.Contains(got, `"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"child","version":"1"},"k":1}`) {
		t.Fatalf("tools/call answer %s", got)
	}
	errAnswer := `{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no"}}`
	if got := string(r.modernAnswer("tools/list")([]byte(errAnswer))); got != errAnswer {
		t.Fatalf("an error answer must pass unchanged, got %s", got)
	}
	if modernStatus([]byte(errAnswer)) != 404 {
		t.Fatalf("-32601 must be 404")
	}
}

func TestListenersGetWhatTheyAskedForWithTheirSubscriptionID(t *testing.T) {
	var wrote []string
	r := NewRouter(func(b []byte) error { wrote = append(wrote, string(b)); return nil }, 1<<20)
	r.initRes = map[string]json.RawMessage{"capabilities": json.RawMessage(`{"tools":{"listChanged":true},"resources":{"subscribe":true}}`)}
	tools, err := r.Listen(json.RawMessage(`"t"`), ListenFilter{ToolsListChanged: true, PromptsListChanged: true})
	if err != nil {
		t.Fatal(err)
	}
	if tools.filter.PromptsListChanged || !tools.filter.ToolsListChanged {
		t.Fatalf("honoured %+v: prompts are not the child's", tools.filter)
	}
	res, _ := r.Listen(json.RawMessage(`2`), ListenFilter{ResourceSubscriptions: []string{"file:///a", "file:///a"}})
	again, _ := r.Listen(json.RawMessage(`3`), ListenFilter{ResourceSubscriptions: []string{"file:///a"}})
	if len(wrote) != 1 || !strings.Contains(wrote[0], `"method":"resources/subscribe"`) || !strings.Contains(wrote[0], `file:///a`) {
		t.Fatalf("the child must be subscribed once to file:///a, wrote %q", wrote)
	}
	if r.Inflight() != 0 {
		t.Fatalf("the bridge's own subscribe is no call in flight")
	}
	r.FromChild([]byte(`{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`))
	r.FromChild([]byte(`{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"file:///a"}}`))
	r.FromChild([]byte(`{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"file:///b"}}`))
	r.FromChild([]byte(`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}`))
	take := func(l *Listener) []string {
		msgs, _, _ := l.out.Take()
		out := make([]string, len(msgs))
		for i, m := range msgs {
			out[i] = string(m)
		}
		return out
	}
	if got := take(tools); len(got) != 1 || got[0] != `{"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":"t"}}}` {
		t.Fatalf("tools listener got %q", got)
	}
	for _, l := range []*Listener{res, again} {
		if got := take(l); len(got) != 1 || !strings.Contains(got[0], `"uri":"file:///a"`) || !strings.Contains(got[0], `"io.modelcontextprotocol/subscriptionId":`+string(l.id)) {
			t.Fatalf("resource listener %s got %q", l.id, got)
		}
	}
	r.draining.Store(true)
	r.EndListeners()
	msgs, closed, _ := tools.out.Take()
	if !closed || len(msgs) != 1 || string(msgs[0]) != `{"id":"t","jsonrpc":"2.0","result":{"_meta":{"io.modelcontextprotocol/subscriptionId":"t"},"resultType":"complete"}}` {
		t.Fatalf("at the drain: closed %v, %q", closed, msgs)
	}
	if _, err := r.Listen(json.RawMessage(`4`), ListenFilter{}); err != ErrDraining {
		t.Fatalf("a listen while draining: %v", err)
	}
}

func TestDecodeHeaderValue(t *testing.T) {
	for in, want := range map[string]string{"plain": "plain", "=?base64?w6k=?=": "é", "=?base64??=": ""} {
		if got, ok := decodeHeaderValue(in); !ok || got != want {
			t.Errorf("%q: got %q %v", in, got, ok)
		}
	}
	if _, ok := decodeHeaderValue("=?base64?not base64?="); ok {
		t.Errorf("a bad payload must not decode")
	}
}
