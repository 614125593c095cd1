-- wrk POST script: a non-streaming Ollama /api/chat.
-- Usage: wrk -t1 -c16 -d10s --latency -s perf/wrk/ollama-chat.lua http://127.0.0.1:8000/api/chat
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"mock-model","stream":false,"messages":[{"role":"user","content":"Say hello in one short sentence."}]}'
