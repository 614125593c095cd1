-- wrk POST script: a small streaming OpenAI chat completion (SSE, usage on).
-- Usage: wrk -t1 -c16 -d10s --latency -s perf/wrk/chat-stream.lua 'http://127.0.0.1:8000/v1/chat/completions?tokens=16'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"mock-model","messages":[{"role":"user","content":"Say hello in one short sentence."}],"stream":true,"stream_options":{"include_usage":true}}'
