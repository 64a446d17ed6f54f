#!/usr/bin/env bash
# curl against a live `gemmakit serve` (run through with_server.py, which sets GK_BASE_URL,
# GK_MODEL and GK_API_KEY). Checks status codes and the shape of each answer with python3.
set -euo pipefail
: "${GK_BASE_URL:?run me through tests/serve/with_server.py}"
AUTH=(-H "Authorization: Bearer ${GK_API_KEY:-}")
JSON=(-H "Content-Type: application/json")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
py() { /usr/bin/python3 -c "$@"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

# status <expected> <curl args...>: runs curl, body in $tmp/body, fails on another status.
status() {
  local want=$1; shift
  local got
  got=$(curl -sS -o "$tmp/body" -w '%{http_code}' "$@")
  [ "$got" = "$want" ] || fail "curl $* -> HTTP $got (want $want): $(head -c 300 "$tmp/body")"
}

status 200 "$GK_BASE_URL/health"
[ ! -s "$tmp/body" ] || fail "/health body is not empty"
status 200 "$GK_BASE_URL/metrics"
grep -q '^vllm:num_requests_running{model_name="tiny",engine="0"} ' "$tmp/body" || fail "/metrics format"
grep -q '^vllm:time_to_first_token_seconds_bucket{model_name="tiny",engine="0",le="+Inf"} ' "$tmp/body" ||
  fail "/metrics histogram"

if [ -n "${GK_API_KEY:-}" ]; then
  status 401 "$GK_BASE_URL/v1/models"
  py 'import json,sys; e=json.load(open(sys.argv[1]))["error"]; assert e["code"]==401, e' "$tmp/body"
fi
status 200 "${AUTH[@]}" "$GK_BASE_URL/v1/models"
py 'import json,sys; d=json.load(open(sys.argv[1])); assert d["data"][0]["id"]=="tiny", d' "$tmp/body"

# The README's example request.
status 200 "${AUTH[@]}" "${JSON[@]}" "$GK_BASE_URL/v1/chat/completions" \
  -d '{"model": "tiny", "messages": [{"role": "user", "content": "Write a Verilog counter"}], "max_tokens": 16, "temperature": 0}'
py 'import json,sys
r=json.load(open(sys.argv[1]))
assert r["object"]=="chat.completion" and r["model"]=="tiny", r
assert r["choices"][0]["message"]["role"]=="assistant", r
assert r["usage"]["completion_tokens"]<=16 and r["usage"]["total_tokens"]==r["usage"]["prompt_tokens"]+r["usage"]["completion_tokens"], r' "$tmp/body"

# Streaming with curl -N: SSE events, a usage chunk, [DONE].
curl -sS -N "${AUTH[@]}" "${JSON[@]}" "$GK_BASE_URL/v1/completions" \
  -d '{"model": "tiny", "prompt": "module counter(", "max_tokens": 12, "ignore_eos": true, "temperature": 0, "stream": true, "stream_options": {"include_usage": true}}' \
  > "$tmp/stream"
py 'import json,sys
raw=open(sys.argv[1]).read()
events=[b[len("data: "):] for b in raw.split("\n\n") if b]
assert all(b.startswith("data: ") for b in raw.split("\n\n") if b), raw[:300]
assert events[-1]=="[DONE]", events[-2:]
usage=json.loads(events[-2])
assert usage["choices"]==[] and usage["usage"]["completion_tokens"]==12, usage
chunks=[json.loads(e) for e in events[:-2]]
assert all(c["object"]=="text_completion" and "usage" in c for c in chunks), chunks[0]
assert chunks[-1]["choices"][0]["finish_reason"]=="length", chunks[-1]' "$tmp/stream"

# Bad input: OpenAI error objects with the right status.
status 400 "${AUTH[@]}" "${JSON[@]}" "$GK_BASE_URL/v1/completions" -d '{"prompt": "x", "max_tokens": -1}'
py 'import json,sys; e=json.load(open(sys.argv[1]))["error"]; assert e["type"]=="invalid_request_error" and "max_tokens" in e["message"], e' "$tmp/body"
status 400 "${AUTH[@]}" "${JSON[@]}" "$GK_BASE_URL/v1/completions" -d '{"prompt": "x",'
status 404 "${AUTH[@]}" "${JSON[@]}" "$GK_BASE_URL/v1/completions" -d '{"model": "gpt-4", "prompt": "x"}'
py 'import json,sys; e=json.load(open(sys.argv[1]))["error"]; assert e["message"]=="The model `gpt-4` does not exist.", e' "$tmp/body"
status 200 "$GK_BASE_URL/health"

# Tokenizer endpoints.
status 200 "${AUTH[@]}" "${JSON[@]}" "$GK_BASE_URL/tokenize" -d '{"model": "tiny", "prompt": "Hello"}'
ids=$(py 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["tokens"][1:]))' "$tmp/body")
status 200 "${AUTH[@]}" "${JSON[@]}" "$GK_BASE_URL/detokenize" -d "{\"tokens\": $ids}"
py 'import json,sys; assert json.load(open(sys.argv[1]))["prompt"]=="Hello"' "$tmp/body"
echo "curl: PASS"
