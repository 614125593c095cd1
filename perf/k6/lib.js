// Shared helpers of IOP's k6 scenarios (perf/k6/*.js).
//
// Every scenario reads where to send from the environment, so the same script
// runs against IOP (Edge + Node), the mock provider directly, and each peer:
//
//   BASE_URL   http://127.0.0.1:PORT            (required; no trailing /v1)
//   MODEL      model name in the request         (default mock-ollama)
//   API_KEY    sent as `Authorization: Bearer`   (optional; LiteLLM needs one)
//   CHAT_PATH  default /v1/chat/completions
//   LABEL      free text copied into the summary (e.g. "iop uring mock-ollama")
//   PROMPT_BYTES  the user message's length in bytes (default 0: "hi"); a
//              long prompt, e.g. 1000000 for a 1 MB request body
//   PROMPT_TEXT   what a long prompt is made of: "plain" (default, one
//              letter repeated: a JSON string without escapes) or "prose"
//              (lines of words with quotes, a newline every ~60 bytes, as
//              real prompts have: a JSON string with escapes)
//   TOOLS      N: a chat is an agent's turn: a `tools` list of N, and after the
//              prompt an assistant's `tool_calls` and the tool's answer, then
//              a question (default 0: the prompt alone)
//   SUMMARY_JSON  where handleSummary writes the compact summary (JSON)
//
// The token text is the mock provider's: every content token is "tok "
// (perf/README.md), so tokens are counted by splitting the body on it —
// independent of how a proxy regroups the SSE events.
//
// k6 buffers a whole response body before the script sees it (no incremental
// reads in k6's HTTP API). So per stream we know: `timings.waiting` (request
// sent → first response byte, i.e. the head; for a stream that is the time to
// first byte), `timings.receiving` (first → last byte) and the body. The
// inter-chunk gap recorded here is the stream's mean gap,
// receiving / (events − 1); a per-gap distribution needs an incremental client.

export function env(name, dflt) {
  const v = __ENV[name];
  return v === undefined || v === '' ? dflt : v;
}

export function envInt(name, dflt) {
  const v = env(name, undefined);
  if (v === undefined) return dflt;
  const n = parseInt(v, 10);
  if (isNaN(n)) throw new Error(`${name}=${v}: not an integer`);
  return n;
}

export const BASE_URL = env('BASE_URL', '');
if (!BASE_URL) throw new Error('set BASE_URL, e.g. -e BASE_URL=http://127.0.0.1:8080');
export const MODEL = env('MODEL', 'mock-ollama');
export const CHAT_URL = BASE_URL.replace(/\/+$/, '') + env('CHAT_PATH', '/v1/chat/completions');
export const LABEL = env('LABEL', `${MODEL} @ ${BASE_URL}`);

export function headers() {
  const h = { 'content-type': 'application/json' };
  const key = env('API_KEY', '');
  if (key) h.authorization = `Bearer ${key}`;
  return h;
}

const PROMPT_BYTES = envInt('PROMPT_BYTES', 0);
const PROMPT_LINE = 'The "quick" brown fox jumps over the lazy dog, twice.\n';

function prompt() {
  if (PROMPT_BYTES <= 0) return 'hi';
  switch (env('PROMPT_TEXT', 'plain')) {
    case 'plain':
      return 'p'.repeat(PROMPT_BYTES);
    case 'prose':
      return PROMPT_LINE.repeat(Math.ceil(PROMPT_BYTES / PROMPT_LINE.length)).slice(0, PROMPT_BYTES);
    default:
      throw new Error(`PROMPT_TEXT=${env('PROMPT_TEXT', '')}: expected plain or prose`);
  }
}

// An agent's turn around the prompt, as the openai client sends one.
const CALL = {
  id: 'call_1',
  type: 'function',
  function: { name: 'get_weather', arguments: JSON.stringify({ city: 'Paris' }) },
};
const WEATHER_TOOL = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather in a city now.',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};

// Past the first, tools as a coding agent declares them (agent-tool.json,
// ~870 bytes: a paragraph of description and a schema of several typed,
// described properties; hack/instructions.sh and the framing json bench
// read the same file), each under a name of its own.
const AGENT_TOOL = JSON.parse(open('./agent-tool.json'));
function workspaceTool(i) {
  const tool = JSON.parse(JSON.stringify(AGENT_TOOL));
  tool.function.name = `workspace_tool_${i}`;
  return tool;
}

const TOOLS = envInt('TOOLS', 0);
const TOOL_LIST = [WEATHER_TOOL];
for (let i = 1; i < TOOLS; i++) TOOL_LIST.push(workspaceTool(i));

export function chatBody(stream) {
  if (TOOLS < 1) {
    return JSON.stringify({
      model: MODEL,
      stream: stream,
      messages: [{ role: 'user', content: prompt() }],
    });
  }
  return JSON.stringify({
    model: MODEL,
    stream: stream,
    tools: TOOL_LIST,
    messages: [
      { role: 'system', content: 'You are a terse assistant.' },
      { role: 'user', content: prompt() },
      { role: 'assistant', content: null, tool_calls: [CALL] },
      { role: 'tool', tool_call_id: 'call_1', content: JSON.stringify({ temp_c: 21 }) },
      { role: 'user', content: 'And tomorrow?' },
    ],
  });
}

// Counts the content tokens ("tok ") in a body.
export function countTokens(body) {
  if (!body) return 0;
  return body.split('tok ').length - 1;
}

// SSE: data events other than [DONE], and whether [DONE] arrived.
export function sseStats(body) {
  if (!body) return { events: 0, done: false };
  let events = 0;
  let done = false;
  const lines = body.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const l = lines[i];
    if (l.startsWith('data:')) {
      if (l.indexOf('[DONE]') >= 0) done = true;
      else events++;
    }
  }
  return { events, done };
}

export const TREND_STATS = ['avg', 'min', 'med', 'p(90)', 'p(99)', 'p(99.9)', 'max', 'count'];

function val(data, metric, stat) {
  const m = data.metrics[metric];
  if (!m || !m.values) return null;
  const v = m.values[stat];
  return v === undefined ? null : v;
}

// handleSummary body shared by the scenarios: writes {label, headline, metrics}
// to SUMMARY_JSON and a short plain-text table to stdout. `headline` lists
// [name, metric, stat] triples: the figures the markdown tables use.
export function summarize(data, scenario, headline) {
  const h = {};
  for (const [name, metric, stat] of headline) h[name] = val(data, metric, stat);
  const out = {
    scenario: scenario,
    label: LABEL,
    base_url: BASE_URL,
    model: MODEL,
    headline: h,
    thresholds_failed: Object.keys(data.metrics).filter(
      (k) => data.metrics[k].thresholds &&
        Object.values(data.metrics[k].thresholds).some((t) => !t.ok)),
    metrics: data.metrics,
    state: data.state,
  };
  let text = `\n${scenario} — ${LABEL}\n`;
  for (const k of Object.keys(h)) {
    const v = h[k];
    text += `  ${k.padEnd(28)} ${v === null ? '-' : (Math.round(v * 1000) / 1000)}\n`;
  }
  if (out.thresholds_failed.length) text += `  THRESHOLDS FAILED: ${out.thresholds_failed.join(', ')}\n`;
  const res = { stdout: text };
  const path = env('SUMMARY_JSON', '');
  if (path) res[path] = JSON.stringify(out, null, 1);
  return res;
}
