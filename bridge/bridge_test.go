package main

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
)

func TestLineReaderSplitsAndDropsOverlongLines(t *testing.T) {
	long := strings.Repeat("x", 5000)
	in := "{\"a\":1}\r\n" + long + "\n{\"b\":2}\n" + long + long + "\n\n{\"c\":3}"
	lr := NewLineReader(strings.NewReader(in), 1024)
	var got []string
	var dropped []int64
	for {
		line, err := lr.Next()
		var tooLong *ErrLineTooLong
		if errors.As(err, &tooLong) {
			dropped = append(dropped, tooLong.Bytes)
			continue
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(line))
	}
	want := []string{`{"a":1}`, `{"b":2}`, ``, `{"c":3}`}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("lines %q, want %q", got, want)
	}
	if len(dropped) != 2 || dropped[0] != 5000 || dropped[1] != 10000 {
		t.Fatalf("dropped %v, want [5000 10000]", dropped)
	}
}

func TestLineReaderLineAtTheBoundIsKept(t *testing.T) {
	line := strings.Repeat("y", 1024)
	lr := NewLineReader(strings.NewReader(line+"\n"+line+"y\n"), 1024)
	got, err := lr.Next()
	if err != nil || len(got) != 1024 {
		t.Fatalf("got %d bytes, %v", len(got), err)
	}
	_, err = lr.Next()
	var tooLong *ErrLineTooLong
	if !errors.As(err, &tooLong) || tooLong.Bytes != 1025 {
		t.Fatalf("want ErrLineTooLong(1025), got %v", err)
	}
}

func TestTailRingKeepsTheLastLinesWithinItsBound(t *testing.T) {
	r := NewTailRing(64)
	for i := 0; i < 100; i++ {
		_, _ = r.Write([]byte("line " + strings.Repeat("z", i%7) + "\n"))
	}
	_, _ = r.Write([]byte("the last line\n"))
	tail := r.Tail()
	if len(tail) > 64 || !strings.HasSuffix(tail, "the last line") || strings.HasPrefix(tail, "\n") {
		t.Fatalf("tail %q", tail)
	}
	if !strings.HasPrefix(tail, "line ") {
		t.Fatalf("tail should start at a whole line: %q", tail)
	}
	_, _ = r.Write([]byte(strings.Repeat("w", 200)))
	if got := r.Tail(); got != strings.Repeat("w", 64) {
		t.Fatalf("one write past the bound keeps its end: %q", got)
	}
}

func TestTerminationMessageIsBounded(t *testing.T) {
	msg := TerminationMessage("exit status 3", strings.Repeat("e", 10000)+"LAST", 4096)
	if len(msg) != 4096 || !strings.HasPrefix(msg, "exit status 3; stderr: ") || !strings.HasSuffix(msg, "LAST") {
		t.Fatalf("len %d, %q...", len(msg), msg[:40])
	}
	if got := TerminationMessage("exit status 0", "", 4096); got != "exit status 0; stderr: " {
		t.Fatalf("%q", got)
	}
}

func TestOutboxEndsAStreamPastItsBound(t *testing.T) {
	o := NewOutbox(100)
	if !o.Push(make([]byte, 150)) { // an empty outbox takes one message whatever its size
		t.Fatal("first message refused")
	}
	if o.Push(make([]byte, 10)) {
		t.Fatal("past the bound: want refused")
	}
	msgs, closed, overrun := o.Take()
	if len(msgs) != 0 || !closed || !overrun {
		t.Fatalf("msgs %d closed %v overrun %v", len(msgs), closed, overrun)
	}
}

// A writer blocked on a client that never reads learns of the overrun without a Take.
func TestOutboxSaysItsOverrunToABlockedWriter(t *testing.T) {
	o := NewOutbox(100)
	select {
	case <-o.Overrun():
		t.Fatal("overrun before any push")
	default:
	}
	o.Push(make([]byte, 150))
	o.Push(make([]byte, 10)) // past the bound: closes Overrun
	select {
	case <-o.Overrun():
	default:
		t.Fatal("Overrun not closed past the bound")
	}
	if !o.Overran() {
		t.Fatal("Overran false past the bound")
	}
	o.Push(make([]byte, 10)) // a push after the overrun must not close the channel twice
}

// childWire records what the router writes to the child.
type childWire struct {
	mu    sync.Mutex
	lines []Message
}

func (c *childWire) write(b []byte) error {
	m, err := ParseMessage(b)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lines = append(c.lines, m)
	return nil
}

func (c *childWire) last() Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lines[len(c.lines)-1]
}

func readyRouter(t *testing.T) (*Router, *childWire) {
	t.Helper()
	wire := &childWire{}
	r := NewRouter(wire.write, 1<<20)
	if err := r.SendInitialize(); err != nil {
		t.Fatal(err)
	}
	init := wire.last()
	var params struct {
		ProtocolVersion string `json:"protocolVersion"`
		ClientInfo      struct{ Name string }
		Capabilities    map[string]any
	}
	_ = json.Unmarshal(init["params"], &params)
	if init.Method() != "initialize" || params.ProtocolVersion != "2025-11-25" || params.ClientInfo.Name != "baton-bridge" || len(params.Capabilities) != 0 {
		t.Fatalf("the bridge's initialize: %s", init.Encode())
	}
	r.FromChild([]byte(`{"jsonrpc":"2.0","id":` + string(init["id"]) + `,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"t","version":"1"}}}`))
	<-r.initDone
	if r.initErr != nil || !r.ready.Load() || wire.last().Method() != "notifications/initialized" {
		t.Fatalf("not ready: %v", r.initErr)
	}
	return r, wire
}

func mustParse(t *testing.T, s string) Message {
	t.Helper()
	m, err := ParseMessage([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestTwoClientsWithTheSameIdGetTheirOwnAnswers(t *testing.T) {
	r, wire := readyRouter(t)
	a, b := r.NewSession("a", "2025-11-25"), r.NewSession("b", "2025-11-25")
	ca, err := r.Forward(a, mustParse(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	idA := wire.last()["id"]
	cb, _ := r.Forward(b, mustParse(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"y"}}`), nil)
	idB := wire.last()["id"]
	if string(idA) == string(idB) || string(idA) == "1" && string(idB) == "1" {
		t.Fatalf("ids not remapped apart: %s %s", idA, idB)
	}
	if r.Inflight() != 2 {
		t.Fatalf("inflight %d", r.Inflight())
	}
	// The child answers b first.
	r.FromChild([]byte(`{"jsonrpc":"2.0","id":` + string(idB) + `,"result":{"for":"b"}}`))
	r.FromChild([]byte(`{"jsonrpc":"2.0","id":` + string(idA) + `,"result":{"for":"a"}}`))
	gotA, gotB := mustParse(t, string(<-ca.answer)), mustParse(t, string(<-cb.answer))
	if string(gotA["id"]) != "1" || string(gotA["result"]) != `{"for":"a"}` || string(gotB["id"]) != "1" || string(gotB["result"]) != `{"for":"b"}` {
		t.Fatalf("a %s b %s", gotA.Encode(), gotB.Encode())
	}
	if r.Inflight() != 0 {
		t.Fatalf("inflight %d after the answers", r.Inflight())
	}
}

func TestProgressAndCancellationAreRemapped(t *testing.T) {
	r, wire := readyRouter(t)
	a := r.NewSession("a", "2025-11-25")
	notes := NewOutbox(1 << 20)
	c, _ := r.Forward(a, mustParse(t, `{"jsonrpc":"2.0","id":"req-7","method":"tools/call","params":{"name":"x","_meta":{"progressToken":"tok"}}}`), notes)
	sent := wire.last()
	tok, _ := sent.ProgressToken()
	if string(tok) == `"tok"` {
		t.Fatal("progress token not remapped")
	}
	r.FromChild([]byte(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":` + string(tok) + `,"progress":1}}`))
	msgs, _, _ := notes.Take()
	if len(msgs) != 1 || string(mustParse(t, string(msgs[0])).Params()["progressToken"]) != `"tok"` {
		t.Fatalf("progress: %q", msgs)
	}
	if !r.Cancel(a, mustParse(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"req-7","reason":"x"}}`)) {
		t.Fatal("cancel not forwarded")
	}
	cancel := wire.last()
	if cancel.Method() != "notifications/cancelled" || string(cancel.Params()["requestId"]) != string(sent["id"]) {
		t.Fatalf("cancel sent as %s, the call went as id %s", cancel.Encode(), sent["id"])
	}
	if ans := mustParse(t, string(<-c.answer)); string(ans["id"]) != `"req-7"` || ans["error"] == nil {
		t.Fatalf("cancelled answer %s", ans.Encode())
	}
	if r.Inflight() != 0 {
		t.Fatalf("a cancelled call is no longer in flight: %d", r.Inflight())
	}
}

func TestServerToClientRequestsAreAnsweredWithAnError(t *testing.T) {
	r, wire := readyRouter(t)
	r.FromChild([]byte(`{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{}}`))
	ans := wire.last()
	if string(ans["id"]) != `"s1"` || ans["error"] == nil {
		t.Fatalf("answer %s", ans.Encode())
	}
	r.FromChild([]byte(`{"jsonrpc":"2.0","id":9,"method":"ping"}`))
	if ans := wire.last(); string(ans["id"]) != "9" || string(ans["result"]) != "{}" {
		t.Fatalf("ping answer %s", ans.Encode())
	}
}

func TestNotificationsGoToEveryOpenGetStream(t *testing.T) {
	r, _ := readyRouter(t)
	a, b := r.NewSession("a", "v"), r.NewSession("b", "v")
	r.NewSession("c", "v") // no GET stream: nothing for it
	ga, _ := r.OpenGet(a)
	gb, _ := r.OpenGet(b)
	if _, ok := r.OpenGet(a); ok {
		t.Fatal("a second GET stream for one session")
	}
	r.FromChild([]byte(`{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`))
	for _, o := range []*Outbox{ga, gb} {
		if msgs, _, _ := o.Take(); len(msgs) != 1 {
			t.Fatalf("got %d", len(msgs))
		}
	}
	r.FromChild([]byte(`not json`)) // logged, nothing forwarded
	if msgs, _, _ := ga.Take(); len(msgs) != 0 {
		t.Fatal("a non-JSON line was forwarded")
	}
}

func TestInitializeResultNegotiatesTheVersion(t *testing.T) {
	r, _ := readyRouter(t)
	res, v := r.InitializeResult("2025-03-26")
	if v != "2025-03-26" || string(res["protocolVersion"]) != `"2025-03-26"` || string(res["capabilities"]) != `{"tools":{}}` {
		t.Fatalf("%s %v", v, res)
	}
	if _, v := r.InitializeResult("1999-01-01"); v != "2025-06-18" {
		t.Fatalf("unknown version: want the child's, got %s", v)
	}
}

func TestFlags(t *testing.T) {
	c, err := parseFlags([]string{"--listen", "127.0.0.1:0", "--", "srv", "--x"}, io.Discard)
	if err != nil || c.Path != "/mcp" || c.DrainSeconds != 30 || c.EOFSeconds != 5 || c.TermSeconds != 5 ||
		c.InitSeconds != 30 || c.MaxLineBytes != 4194304 || c.TerminationLog != "/dev/termination-log" ||
		strings.Join(c.Command, " ") != "srv --x" {
		t.Fatalf("%+v %v", c, err)
	}
	if _, err := parseFlags([]string{"--drain-seconds", "-1", "--", "x"}, io.Discard); err == nil || !strings.Contains(err.Error(), "--drain-seconds") {
		t.Fatalf("want an error naming --drain-seconds, got %v", err)
	}
	if _, err := parseFlags([]string{}, io.Discard); err == nil || !strings.Contains(err.Error(), "COMMAND") {
		t.Fatalf("want an error naming COMMAND, got %v", err)
	}
}
