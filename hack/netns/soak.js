// The soak's load (hack/soak.sh): a closed loop of VUS users for DURATION,
// each request a random mix of streaming / non-streaming and of the raw
// tunnel (model group `chat`) / normalized runs (`ollama`). Every request is
// classified by how it ended, so the soak can check that each got exactly
// one terminal:
//
//   term_done        200 and a clean end ([DONE], or a whole JSON answer)
//   term_error_event 200 stream that ended with one error event (F27)
//   term_http_error  an HTTP error answer (status >= 400)
//   term_cut         a body cut after the head, or a reset/refused
//                    connection (the designed end of a tunnel failure after
//                    commit; the client sees it)
//   term_double      more than one terminal in one response (must be 0)
//   hung             no end within REQ_TIMEOUT (must be 0)
//
//   k6 run -e BASE_URL=http://10.77.0.1:8080 -e VUS=16 -e DURATION=600s hack/netns/soak.js
import http from 'k6/http';
import { Counter } from 'k6/metrics';
import { env, envInt, headers, sseStats } from '../../perf/k6/lib.js';

const BASE = env('BASE_URL', '').replace(/\/+$/, '');
const counters = {};
// http_NNN: the HTTP error answers by status (why requests failed).
const STATUSES = [400, 404, 408, 429, 500, 502, 503, 504];
for (const name of ['requests', 'term_done', 'term_error_event', 'term_http_error', 'term_cut', 'term_double', 'hung',
  ...STATUSES.map((s) => `http_${s}`), 'http_other']) {
  counters[name] = new Counter(name);
}

export const options = {
  scenarios: {
    soak: {
      executor: 'constant-vus',
      vus: envInt('VUS', 16),
      duration: env('DURATION', '600s'),
      gracefulStop: '40s',
    },
  },
  summaryTrendStats: ['avg', 'p(99)', 'max', 'count'],
};

const params = { headers: headers(), timeout: env('REQ_TIMEOUT', '30s') };

export default function () {
  const stream = Math.random() < 0.7;
  const model = Math.random() < 0.5 ? 'chat' : 'ollama';
  const body = JSON.stringify({ model, stream, messages: [{ role: 'user', content: 'hi' }] });
  counters.requests.add(1);
  const res = http.post(`${BASE}/v1/chat/completions`, body, params);
  if (res.error_code === 1050) {
    counters.hung.add(1);
    return;
  }
  if (res.status === 0 || res.error) {
    counters.term_cut.add(1);
    return;
  }
  if (res.status >= 400) {
    counters.term_http_error.add(1);
    counters[STATUSES.includes(res.status) ? `http_${res.status}` : 'http_other'].add(1);
    return;
  }
  if (!stream) {
    let whole = false;
    try {
      whole = JSON.parse(res.body).choices !== undefined;
    } catch (e) {
      whole = false;
    }
    counters[whole ? 'term_done' : 'term_cut'].add(1);
    return;
  }
  const s = sseStats(res.body);
  const errors = (res.body || '').split('\n').filter((l) => l.startsWith('data: {"error"')).length;
  const ends = (s.done ? 1 : 0) + errors;
  if (ends > 1) counters.term_double.add(1);
  else if (ends === 0) counters.term_cut.add(1);
  else counters[s.done ? 'term_done' : 'term_error_event'].add(1);
}

export function handleSummary(data) {
  const out = {};
  for (const name of Object.keys(counters)) {
    const m = data.metrics[name];
    out[name] = m ? m.values.count : 0;
  }
  const res = { stdout: JSON.stringify(out) + '\n' };
  const path = env('SUMMARY_JSON', '');
  if (path) res[path] = JSON.stringify(out);
  return res;
}
