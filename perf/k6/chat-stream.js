// Scenario (a): chat completions, streaming. Closed loop: VUS virtual users,
// each sends one streaming request after the other for DURATION.
//
//   k6 run -e BASE_URL=http://127.0.0.1:8080 -e MODEL=mock-ollama perf/k6/chat-stream.js
//
// Env (besides lib.js's): VUS (default 16), DURATION (10s),
// EXPECT_TOKENS (content tokens each stream must carry; 0 = don't check),
// MAX_ERROR_RATE (threshold on `errors`, default 0), BULK (1: large events,
// the `bulk` scenario — each body is read as bytes, not text, and only its
// status and its `[DONE]` end are checked: decoding and scanning megabytes
// as a JavaScript string would make k6, not the path, the bottleneck).
//
// Custom metrics:
//   ttfb            Trend (ms)  request sent → first response byte
//   stream_duration Trend (ms)  request sent → last byte
//   chunk_gap       Trend (ms)  mean gap between SSE events of one stream:
//                               receiving / (events − 1) (k6 buffers bodies)
//   tokens_per_s    Trend       content tokens / stream duration, per stream
//   tokens          Counter     content tokens received (rate = tokens/s total)
//   stream_events   Counter     SSE data events (without [DONE])
//   body_mib        Counter     body MiB received (rate = MiB/s total)
//   errors          Rate        non-200, no [DONE], or the wrong token count
import http from 'k6/http';
import { check } from 'k6';
import { Counter, Rate, Trend } from 'k6/metrics';
import { CHAT_URL, chatBody, countTokens, env, envInt, headers, sseStats, summarize, TREND_STATS } from './lib.js';

const ttfb = new Trend('ttfb', true);
const streamDuration = new Trend('stream_duration', true);
const chunkGap = new Trend('chunk_gap', true);
const tokensPerS = new Trend('tokens_per_s');
const tokens = new Counter('tokens');
const events = new Counter('stream_events');
const bodyMiB = new Counter('body_mib');
const errors = new Rate('errors');

const EXPECT = envInt('EXPECT_TOKENS', 0);
const BULK = envInt('BULK', 0) === 1;
const MIB = 1024 * 1024;

export const options = {
  scenarios: {
    chat_stream: {
      executor: 'constant-vus',
      vus: envInt('VUS', 16),
      duration: env('DURATION', '10s'),
      gracefulStop: '5s',
    },
  },
  thresholds: { errors: [`rate<=${env('MAX_ERROR_RATE', '0')}`] },
  summaryTrendStats: TREND_STATS,
  discardResponseBodies: false,
};

const body = chatBody(true);
const params = {
  headers: headers(),
  timeout: env('REQ_TIMEOUT', '60s'),
  responseType: BULK ? 'binary' : 'text',
};

// Whether a binary body's last bytes hold the `[DONE]` event.
function endsWithDone(buf) {
  if (!buf || buf.byteLength === 0) return false;
  const tail = new Uint8Array(buf, Math.max(0, buf.byteLength - 32));
  return String.fromCharCode.apply(null, Array.from(tail)).includes('[DONE]');
}

function bulk(res) {
  const ok = check(res, {
    'status 200': (r) => r.status === 200,
    'ends with [DONE]': (r) => endsWithDone(r.body),
  });
  errors.add(!ok);
  if (res.status !== 200) return;
  ttfb.add(res.timings.waiting);
  streamDuration.add(res.timings.duration);
  bodyMiB.add(res.body ? res.body.byteLength / MIB : 0);
}

export default function () {
  const res = http.post(CHAT_URL, body, params);
  if (BULK) {
    bulk(res);
    return;
  }
  const s = sseStats(res.body);
  const n = countTokens(res.body);
  const ok = check(res, {
    'status 200': (r) => r.status === 200,
    'ends with [DONE]': () => s.done,
    'all tokens': () => EXPECT === 0 || n === EXPECT,
  });
  errors.add(!ok);
  if (res.status !== 200) return;
  ttfb.add(res.timings.waiting);
  streamDuration.add(res.timings.duration);
  if (s.events > 1) chunkGap.add(res.timings.receiving / (s.events - 1));
  if (res.timings.duration > 0) tokensPerS.add(n / (res.timings.duration / 1000));
  tokens.add(n);
  events.add(s.events);
  bodyMiB.add(res.body.length / MIB);
}

export function handleSummary(data) {
  return summarize(data, 'chat-stream', [
    ['streams/s', 'http_reqs', 'rate'],
    ['tokens/s (all streams)', 'tokens', 'rate'],
    ['MiB/s (all streams)', 'body_mib', 'rate'],
    ['ttfb p50 ms', 'ttfb', 'med'],
    ['ttfb p99 ms', 'ttfb', 'p(99)'],
    ['chunk gap p50 ms', 'chunk_gap', 'med'],
    ['chunk gap p99 ms', 'chunk_gap', 'p(99)'],
    ['stream p99 ms', 'stream_duration', 'p(99)'],
    ['tokens/s per stream p50', 'tokens_per_s', 'med'],
    ['error rate', 'errors', 'rate'],
  ]);
}
