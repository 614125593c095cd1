"""Small chats through an OpenAI-compatible endpoint, for hack/instructions.sh
and hack/allocations.sh: N requests over CONNECTIONS keep-alive connections
(default 4); exits non-zero on any answer that is not a 200.

  chat_client.py URL MODEL N PROMPT_BYTES API STREAM TOOLS IMAGE_BYTES MESSAGES [CONNECTIONS]

PROMPT_BYTES, IMAGE_BYTES and MESSAGES may be empty; API is chat or
responses; STREAM is 0 or 1; TOOLS is a number (0: none). See
hack/instructions.sh's header for what each shapes.
"""
import http.client, json, os, sys, threading, urllib.parse
url, model, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
# k6's PROMPT_TEXT=prose (perf/k6/lib.js): lines with quotes and a newline.
line = os.environ.get("PROMPT_LINE") or 'The "quick" brown fox jumps over the lazy dog, twice.\n'
content = (line * (int(sys.argv[4]) // len(line) + 1))[:int(sys.argv[4])] if sys.argv[4] else "hi"
host = urllib.parse.urlsplit(url).netloc
stream = sys.argv[6] == "1"
if sys.argv[8]:
    # A vision request: the text, then an image as a base64 data URL.
    b64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA"
    image = (b64 * (int(sys.argv[8]) // len(b64) + 1))[:int(sys.argv[8])]
    content = [{"type": "text", "text": content},
               {"type": "image_url", "image_url": {"url": "data:image/png;base64," + image}}]
if sys.argv[5] == "responses":
    path, body = "/v1/responses", json.dumps({"model": model, "stream": stream, "input": content})
elif sys.argv[7] != "0":
    # An agent's turn, as the openai client sends one; past the first, tools
    # as a coding agent declares them (perf/k6/agent-tool.json, ~870 bytes:
    # a paragraph of description and a schema of several typed, described
    # properties), each under a name of its own.
    with open("perf/k6/agent-tool.json") as f:
        template = json.load(f)
    def workspace_tool(i):
        tool = json.loads(json.dumps(template))
        tool["function"]["name"] = f"workspace_tool_{i}"
        return tool
    call = {"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}
    path, body = "/v1/chat/completions", json.dumps({
        "model": model, "stream": stream,
        "tools": [{"type": "function", "function": {
            "name": "get_weather", "description": "The weather in a city now.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                           "required": ["city"]}}}] + [workspace_tool(i) for i in range(1, int(sys.argv[7]))],
        "messages": [
            {"role": "system", "content": "You are a terse assistant."},
            {"role": "user", "content": content},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": json.dumps({"temp_c": 21})},
            {"role": "user", "content": "And tomorrow?"}]})
else:
    # A chat client's history before the question, when asked for.
    turn = ('The "quick" brown fox jumps over the lazy dog, twice.\n' * 6)[:300]
    history = [{"role": ("user", "assistant")[i % 2], "content": turn}
               for i in range(int(sys.argv[9] or 0))]
    path, body = "/v1/chat/completions", json.dumps(
        {"model": model, "stream": stream,
         "messages": history + [{"role": "user", "content": content}]})
failed = []
def run(count):
    conn = http.client.HTTPConnection(host, timeout=120)
    for _ in range(count):
        conn.request("POST", path, body,
                     {"content-type": "application/json"})
        answer = conn.getresponse()
        answer.read()
        if answer.status != 200:
            failed.append(answer.status)
conns = int(sys.argv[10]) if len(sys.argv) > 10 and sys.argv[10] else 4
threads = [threading.Thread(target=run, args=(n // conns + (i < n % conns),)) for i in range(conns)]
for t in threads: t.start()
for t in threads: t.join()
if failed:
    sys.exit(f"{len(failed)} of {n} requests failed: {sorted(set(failed))}")
