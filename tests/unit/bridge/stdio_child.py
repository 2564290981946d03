"""A small stdio MCP server for the bridge's tests: one JSON-RPC message a line, no SDK.

It records what it received and when (one JSON object a line) in the file named by
BATON_TEST_CHILD_RECORD: every request's method and id as it arrived, stdin's EOF, SIGTERM, so a
test can read what order the bridge did things in. BATON_TEST_CHILD_MODE changes its manners:
  ignore-eof    keeps running after stdin's EOF, and ignores SIGTERM too (only SIGKILL ends it)
  no-init       never answers initialize
Tools: echo (answers with the id it received), slow (sleeps `seconds`, sends progress when asked,
stops without an answer when cancelled), long_line (writes a line of `bytes` bytes, then its
answer), not_json (writes a line that is not JSON, then its answer), die (writes stderr lines,
exits with `status`), notify (sends tools/list_changed), flood
(`count` log notifications of `bytes` bytes), sample (asks the client to sample).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

RECORD = os.environ.get("BATON_TEST_CHILD_RECORD", "")
MODE = os.environ.get("BATON_TEST_CHILD_MODE", "")
write_lock = threading.Lock()
cancelled: dict[str, threading.Event] = {}
answers: dict[str, dict[str, object]] = {}


def record(event: str, **fields: object) -> None:
    if not RECORD:
        return
    with open(RECORD, "a", encoding="utf-8") as out:
        out.write(json.dumps({"event": event, "t": time.monotonic(), **fields}) + "\n")


def send(message: dict[str, object]) -> None:
    with write_lock:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def send_raw(text: str) -> None:
    with write_lock:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()


def text_result(request_id: object, text: str) -> None:
    send({"jsonrpc": "2.0", "id": request_id, "result": {"content": [{"type": "text", "text": text}]}})


def call_tool(request_id: object, params: dict[str, object]) -> None:
    name = params.get("name")
    args = params.get("arguments") or {}
    assert isinstance(args, dict)
    meta = params.get("_meta") or {}
    assert isinstance(meta, dict)
    if name == "echo":
        text_result(request_id, json.dumps({"received_id": request_id, "arguments": args}))
    elif name == "slow":
        done = cancelled.setdefault(json.dumps(request_id), threading.Event())
        token = meta.get("progressToken")
        if token is not None:
            send({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": token, "progress": 1}})
            record("progress-sent", token=token)
        if done.wait(float(args.get("seconds", 1))):
            record("slow-cancelled", id=request_id)
            return
        record("slow-answered", id=request_id)
        text_result(request_id, json.dumps({"received_id": request_id, "token": token}))
    elif name == "long_line":
        send_raw('{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"' + "x" * int(args["bytes"]) + '"}}')
        text_result(request_id, "after the long line")
    elif name == "not_json":
        send_raw("this is not JSON at all")
        text_result(request_id, "after the non-JSON line")
    elif name == "die":
        for i in range(int(args.get("lines", 3))):
            sys.stderr.write(f"dying line {i}\n")
        sys.stderr.write("the last words\n")
        sys.stderr.flush()
        os._exit(int(args.get("status", 3)))
    elif name == "flood":
        # Faster than a client that does not read: `count` notifications of `bytes` bytes each.
        filler = "f" * int(args.get("bytes", 65536))
        for i in range(int(args.get("count", 400))):
            send({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": filler, "i": i}})
        text_result(request_id, "flooded")
    elif name == "notify":
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        text_result(request_id, "notified")
    elif name == "sample":
        send({"jsonrpc": "2.0", "id": "child-req-1", "method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 1}})
        deadline = time.monotonic() + 5
        while "child-req-1" not in answers and time.monotonic() < deadline:
            time.sleep(0.01)
        text_result(request_id, json.dumps(answers.get("child-req-1")))
    else:
        send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32602, "message": f"unknown tool {name}"}})


def on_sigterm(signum: int, frame: object) -> None:
    record("sigterm")
    if MODE != "ignore-eof":
        os._exit(143)


def main() -> None:
    signal.signal(signal.SIGTERM, on_sigterm)
    record("started", pid=os.getpid())
    for line in sys.stdin:
        message = json.loads(line)
        method = message.get("method")
        request_id = message.get("id")
        record("received", method=method, id=request_id, params=message.get("params"))
        if method is None:
            answers[str(request_id)] = message
            continue
        if method == "initialize":
            if MODE == "no-init":
                continue
            send({"jsonrpc": "2.0", "id": request_id, "result": {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {"listChanged": True}},
                "serverInfo": {"name": "baton-test-child", "version": "1"},
            }})
        elif method == "notifications/cancelled":
            params = message["params"]
            cancelled.setdefault(json.dumps(params["requestId"]), threading.Event()).set()
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": request_id, "result": {"tools": [
                {"name": n, "inputSchema": {"type": "object"}} for n in ("echo", "slow", "die")
            ]}})
        elif method == "tools/call":
            threading.Thread(target=call_tool, args=(request_id, message["params"]), daemon=True).start()
        elif request_id is not None:
            send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": f"no method {method}"}})
    record("stdin-eof")
    if MODE == "ignore-eof":
        while True:
            time.sleep(1)
    # Let tool threads still running finish their answer (they are daemon threads).
    time.sleep(0.05)


if __name__ == "__main__":
    main()
