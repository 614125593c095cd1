// Scenario (b): small non-streaming chat completions at a fixed arrival rate
// (open loop: k6 starts RATE requests per second whatever the latency, so the
// latency percentiles are not hidden by coordinated omission).
//
//   k6 run -e BASE_URL=http://127.0.0.1:8080 -e MODEL=mock-ollama -e RATE=1000 perf/k6/chat-nonstream.js
//
// Env (besides lib.js's): RATE (requests/s, default 1000), DURATION (10s),
// VUS (pre-allocated VUs, default 64), MAX_VUS (default 512),
// MAX_ERROR_RATE (threshold on `errors`, default 0).
// CONCURRENCY=N (N > 0) runs a closed loop of N users instead (no RATE): the
// most QPS the target serves at that concurrency.
// Figures: achieved QPS (http_reqs rate), http_req_duration p50/p99/p99.9,
// dropped_iterations (requests k6 could not start: the target was too slow or
// the load generator ran out of VUs), errors.
import http from 'k6/http';
import { check } from 'k6';
import { Rate } from 'k6/metrics';
import { CHAT_URL, chatBody, env, envInt, headers, summarize, TREND_STATS } from './lib.js';

const errors = new Rate('errors');

const CONCURRENCY = envInt('CONCURRENCY', 0);

export const options = {
  scenarios: {
    chat_nonstream: CONCURRENCY > 0
      ? {
        // closed loop: the most QPS CONCURRENCY users get
        executor: 'constant-vus',
        vus: CONCURRENCY,
        duration: env('DURATION', '10s'),
        gracefulStop: '5s',
      }
      : {
        executor: 'constant-arrival-rate',
        rate: envInt('RATE', 1000),
        timeUnit: '1s',
        duration: env('DURATION', '10s'),
        preAllocatedVUs: envInt('VUS', 64),
        maxVUs: envInt('MAX_VUS', 512),
        gracefulStop: '5s',
      },
  },
  thresholds: { errors: [`rate<=${env('MAX_ERROR_RATE', '0')}`] },
  summaryTrendStats: TREND_STATS,
};

const body = chatBody(false);
const params = { headers: headers(), timeout: env('REQ_TIMEOUT', '30s') };

export default function () {
  const res = http.post(CHAT_URL, body, params);
  const ok = check(res, {
    'status 200': (r) => r.status === 200,
    'a chat.completion': (r) => typeof r.body === 'string' && r.body.indexOf('"chat.completion"') >= 0,
  });
  errors.add(!ok);
}

export function handleSummary(data) {
  return summarize(data, 'chat-nonstream', [
    ['QPS', 'http_reqs', 'rate'],
    ['p50 ms', 'http_req_duration', 'med'],
    ['p99 ms', 'http_req_duration', 'p(99)'],
    ['p99.9 ms', 'http_req_duration', 'p(99.9)'],
    ['max ms', 'http_req_duration', 'max'],
    ['dropped', 'dropped_iterations', 'count'],
    ['error rate', 'errors', 'rate'],
  ]);
}
