-- wrk POST script: a small non-streaming OpenAI chat completion.
-- Usage: wrk -t1 -c16 -d10s --latency -s perf/wrk/chat.lua http://127.0.0.1:8000/v1/chat/completions
-- Knobs go in the URL query (e.g. ?tokens=16) or as extra wrk -H 'x-mock-…: V' headers.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"mock-model","messages":[{"role":"user","content":"Say hello in one short sentence."}],"max_tokens":16}'
