// Scenario (c): a ramp of concurrent long streams. VUS virtual users start one
// after the other over RAMP, then all stay for HOLD; each VU keeps BATCH
// streams open at once (http.batch), so the open streams ramp to VUS × BATCH
// without one k6 VU (a JS runtime) per stream. How long one stream lasts is
// the provider's business (the mock's --tokens × --delay-ms); a VU opens its
// next BATCH as soon as the last one ends. The load script samples the
// processes' RSS and CPU from /proc while this runs (hack/loadtest.sh).
//
//   k6 run -e BASE_URL=http://127.0.0.1:8080 -e MODEL=mock-ollama \
//          -e VUS=100 -e BATCH=100 -e RAMP=20s -e HOLD=30s perf/k6/long-streams.js
//
// Env (besides lib.js's): VUS (default 20), BATCH (default 50), RAMP (20s),
// HOLD (30s), EXPECT_TOKENS (0 = don't check), REQ_TIMEOUT (120s),
// MAX_ERROR_RATE (default 0).
import http from 'k6/http';
import { Counter, Rate, Trend } from 'k6/metrics';
import { CHAT_URL, chatBody, countTokens, env, envInt, headers, sseStats, summarize, TREND_STATS } from './lib.js';

const ttfb = new Trend('ttfb', true);
const streamDuration = new Trend('stream_duration', true);
const streams = new Counter('streams_completed');
const tokens = new Counter('tokens');
const errors = new Rate('errors');

const VUS = envInt('VUS', 20);
const BATCH = envInt('BATCH', 50);
const EXPECT = envInt('EXPECT_TOKENS', 0);

export const options = {
  scenarios: {
    long_streams: {
      executor: 'ramping-vus',
      startVUs: 0,
      stages: [
        { duration: env('RAMP', '20s'), target: VUS },
        { duration: env('HOLD', '30s'), target: VUS },
      ],
      gracefulRampDown: '0s',
      gracefulStop: '0s',
    },
  },
  batch: BATCH,
  batchPerHost: BATCH,
  thresholds: { errors: [`rate<=${env('MAX_ERROR_RATE', '0')}`] },
  summaryTrendStats: TREND_STATS,
};

const req = {
  method: 'POST',
  url: CHAT_URL,
  body: chatBody(true),
  params: { headers: headers(), timeout: env('REQ_TIMEOUT', '120s') },
};
const reqs = [];
for (let i = 0; i < BATCH; i++) reqs.push(req);

export default function () {
  const responses = http.batch(reqs);
  for (const res of responses) {
    const s = sseStats(res.body);
    const n = countTokens(res.body);
    const ok = res.status === 200 && s.done && (EXPECT === 0 || n === EXPECT);
    errors.add(!ok);
    if (res.status !== 200) continue;
    ttfb.add(res.timings.waiting);
    streamDuration.add(res.timings.duration);
    streams.add(1);
    tokens.add(n);
  }
}

export function handleSummary(data) {
  return summarize(data, 'long-streams', [
    ['streams completed', 'streams_completed', 'count'],
    ['ttfb p50 ms', 'ttfb', 'med'],
    ['ttfb p99 ms', 'ttfb', 'p(99)'],
    ['stream p50 ms', 'stream_duration', 'med'],
    ['stream max ms', 'stream_duration', 'max'],
    ['error rate', 'errors', 'rate'],
    ['max VUs', 'vus_max', 'value'],
  ]);
}
