// The TypeScript-SDK MCP client of the kind e2e gateway test (tests/e2e/test_gateway_mcp.py): the
// official @modelcontextprotocol/sdk (package-lock.json) with its StreamableHTTPClientTransport
// and Client, in a pod, calling a runtime through its Service name. Plain JavaScript on Node: the
// SDK's published build is what an agent runs; nothing here needs a compile step.
//
//   node /srv/client.mjs --url http://<runtime>.<ns>.svc/mcp --final v6
//
// The SDK's default protocol era (its LATEST_PROTOCOL_VERSION, 2025-11-25 in 1.32: initialize,
// then an Mcp-Session-Id). ONE Client and ONE transport for the whole run, as a long-lived agent
// keeps them: no reconnect and no new session of our own (the SDK does not re-initialize after a
// 404 either): a failed call is counted and the next call goes on the same session.
// - lists tools first (as agents do), then calls `fast` every --interval seconds;
// - after --warm answered calls: one `slow` call (--slow seconds) on the same session.
// It stops once --after calls were answered by the version --final and the slow call ended, or
// after --max-seconds. Every event is one JSON line on stdout; the last is {"ev": "summary", ...},
// shaped like one era of tests/e2e/mcptool/client.py's summary. Exit code 0 whenever the summary
// is printed: the test judges it.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { LATEST_PROTOCOL_VERSION } from '@modelcontextprotocol/sdk/types.js';
import { parseArgs } from 'node:util';

const { values: opts } = parseArgs({
  options: {
    url: { type: 'string' },
    final: { type: 'string' },
    interval: { type: 'string', default: '0.2' },
    warm: { type: 'string', default: '5' },
    slow: { type: 'string', default: '10' },
    after: { type: 'string', default: '5' },
    'call-timeout': { type: 'string', default: '180' },
    'max-seconds': { type: 'string', default: '400' },
  },
});
if (!opts.url || !opts.final) {
  console.error('--url and --final are required');
  process.exit(2);
}
const interval = Number(opts.interval) * 1000;
const warm = Number(opts.warm);
const slowSeconds = Number(opts.slow);
const after = Number(opts.after);
const callTimeout = Number(opts['call-timeout']) * 1000;
const deadline = Date.now() + Number(opts['max-seconds']) * 1000;
const ERA = `ts-sdk ${LATEST_PROTOCOL_VERSION}`;

const now = () => Math.round(Date.now()) / 1000;
const emit = (ev) => console.log(JSON.stringify({ t: now(), ...ev }));
const describe = (e) => `${e?.name ?? 'Error'}: ${e?.message ?? String(e)}`.slice(0, 200);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const versionNumber = (v) => Number(String(v).replace(/^v/, ''));

const era = {
  ok: 0, failed: 0, sessions: 0, versions: {}, order: [], monotonic: true, errors: [], http: {},
  transport_errors: [], max_call_seconds: 0, lost_seconds: 0, slow: {}, final: 0,
};
const sessionIds = new Set();

// The transport's fetch, watched: every answer's status and Mcp-Session-Id (what an HTTP hook sees).
async function watchedFetch(url, init) {
  const resp = await fetch(url, init);
  const sid = resp.headers.get('mcp-session-id');
  if (sid) sessionIds.add(sid);
  if (resp.status >= 300) {
    const method = init?.method ?? 'GET';
    const reason = resp.headers.get('baton-reason');
    const key = `${method} ${resp.status} ${reason ?? '-'}`;
    era.http[key] = (era.http[key] ?? 0) + 1;
    emit({ ev: 'http', era: ERA, method, status: resp.status, reason,
           generation: resp.headers.get('baton-generation') });
  }
  return resp;
}

function textOf(result) {
  if (result.isError) throw new Error(`tool error: ${JSON.stringify(result.content)}`);
  return String(result.content[0].text);
}

function answered(v) {
  era.ok += 1;
  era.versions[v] = (era.versions[v] ?? 0) + 1;
  const last = era.order[era.order.length - 1];
  if (last !== undefined && versionNumber(v) < versionNumber(last)) era.monotonic = false;
  if (last !== v) era.order.push(v);
}

async function fastLoop(client, warmed) {
  let failedAt = null;
  while (Date.now() < deadline) {
    const t0 = Date.now();
    try {
      const v = textOf(await client.callTool({ name: 'fast', arguments: {} }, undefined,
                                             { timeout: callTimeout }));
      const dt = (Date.now() - t0) / 1000;
      answered(v);
      era.max_call_seconds = Math.max(era.max_call_seconds, dt);
      if (era.ok >= warm) warmed();
      if (v === opts.final) era.final += 1;
      if (failedAt !== null) {
        era.lost_seconds += (Date.now() - failedAt) / 1000;
        failedAt = null;
      }
      emit({ ev: 'call', era: ERA, tool: 'fast', ok: true, v, t0: t0 / 1000, seconds: dt });
      if (era.final >= after) return;
    } catch (e) {
      era.failed += 1;
      era.errors.push(describe(e));
      failedAt = failedAt ?? t0;
      emit({ ev: 'call', era: ERA, tool: 'fast', ok: false, t0: t0 / 1000,
             seconds: (Date.now() - t0) / 1000, error: describe(e) });
    }
    await sleep(interval);
  }
}

async function slowCall(client, started) {
  await started;
  const t0 = Date.now();
  emit({ ev: 'slow-start', era: ERA });
  try {
    const v = textOf(await client.callTool({ name: 'slow', arguments: { seconds: slowSeconds } },
                                           undefined, { timeout: slowSeconds * 1000 + callTimeout }));
    era.slow = { ok: true, v, t0: t0 / 1000, t1: now() };
  } catch (e) {
    era.slow = { ok: false, error: describe(e), t0: t0 / 1000, t1: now() };
  }
  emit({ ev: 'slow-end', era: ERA, ...era.slow });
}

async function main() {
  const transport = new StreamableHTTPClientTransport(new URL(opts.url), { fetch: watchedFetch });
  const client = new Client({ name: 'baton-e2e-ts', version: '0.0.0' });
  // The SDK reports transport errors (a GET event stream that could not reopen, ...) here; they
  // are no failed call of ours, but shown.
  client.onerror = (e) => {
    era.transport_errors.push(describe(e));
    emit({ ev: 'transport-error', era: ERA, error: describe(e) });
  };
  let timedOut = false;
  try {
    await client.connect(transport, { timeout: callTimeout });
    era.sessions += 1;
    await client.listTools(undefined, { timeout: callTimeout });
    emit({ ev: 'session', era: ERA, n: era.sessions, protocol: transport.protocolVersion });
    let warmed;
    const started = new Promise((resolve) => { warmed = resolve; });
    const run = Promise.all([fastLoop(client, warmed), slowCall(client, started)]);
    const limit = sleep(Math.max(1000, deadline - Date.now())).then(() => 'timeout');
    timedOut = (await Promise.race([run, limit])) === 'timeout';
  } catch (e) {
    era.failed += 1;
    era.errors.push(describe(e));
    emit({ ev: 'session-error', era: ERA, error: describe(e) });
  }
  emit({ ev: 'summary', timed_out: timedOut, eras: { [ERA]: {
    ...era, session_ids: sessionIds.size,
    session_id_prefix: [...sessionIds].map((s) => s.slice(0, 4)).sort(),
    max_call_seconds: Math.round(era.max_call_seconds * 1000) / 1000,
    lost_seconds: Math.round(era.lost_seconds * 1000) / 1000 } } });
  // Ends the session on the server (DELETE), as an agent that shuts down does; then exit.
  await Promise.race([transport.terminateSession().catch(() => {}), sleep(5000)]);
  await Promise.race([client.close().catch(() => {}), sleep(5000)]);
  process.exit(0);
}

main();
