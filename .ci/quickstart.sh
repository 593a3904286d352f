#!/usr/bin/env bash
# CI step: the README's first Quickstart command, as written, in a clean venv in a temp folder:
# it must install and serve the bundled default model. We then ask it for a completion and stop it.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmd=$(grep -m1 -E '^    python3 -m venv \.venv && \.venv/bin/pip install \. && ' README.md | sed 's/^    //')
[ -n "$cmd" ] || { echo "quickstart: README's first command not found"; exit 1; }
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir "$work/src"
tar -C . --exclude=./.venv -cf - . | tar -C "$work/src" -xf - # the checkout without its venv (~1 GB)
cd "$work/src"
# The README command serves on the default port 8080; the port is moved so CI never collides.
bash -c "${cmd} --port ${port}" > "$work/server.log" 2>&1 &
pid=$!
ok=0
for _ in $(seq 1 600); do
  if curl -fsS "http://127.0.0.1:${port}/health" > /dev/null 2>&1; then ok=1; break; fi
  if ! kill -0 "$pid" 2> /dev/null; then break; fi
  sleep 1
done
if [ "$ok" != 1 ]; then
  echo "quickstart: the server never became healthy"; tail -50 "$work/server.log"; kill "$pid" 2> /dev/null || true; exit 1
fi
body='{"prompt": "def fibonacci(n):\n", "max_tokens": 24, "temperature": 0}'
out=$(curl -fsS -H 'Content-Type: application/json' -d "$body" "http://127.0.0.1:${port}/v1/completions")
echo "quickstart completion: $out"
echo "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); t=d["choices"][0]["text"]; assert t.strip(), "empty completion"'
pkill -TERM -P "$pid" 2> /dev/null || true
kill -TERM "$pid" 2> /dev/null || true
wait "$pid" 2> /dev/null || true
echo "quickstart: ok"
