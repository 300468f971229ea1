#!/usr/bin/env bash
# Start vLLM's OpenAI API server on the CPU (the venv and model of scripts/vllm/setup.sh), in the
# background in a session of its own, and wait until it answers /health.
#
#     scripts/vllm/serve.sh [start] [--port 8765] [--model DIR] [--log FILE] [--timeout S]
#     scripts/vllm/serve.sh stop PID      # SIGTERM the server's process tree, SIGKILL what is left
#
# VLLM_EXTRA_ARGS: more flags for vLLM's server, as one string (a small KV cache, to see it
# fill and preempt: VLLM_EXTRA_ARGS="--num-gpu-blocks-override 4", blocks of 128 tokens here)
#
# `start` prints `ready pid=PID port=PORT log=FILE` as its last line and exits 0 once the server
# is ready (65-80 s on 2 idle cores); it exits 1, killing what it started, if the server dies or
# is not ready by the deadline (default 300 s). The server keeps running: stop it with `stop PID`
# (vLLM's engine core and worker processes can outlive a SIGTERM to the API server).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
VENV="${VENV:-$ROOT/.venv-vllm}"

descendants() {  # every descendant of $1, children before grandchildren
  local kids
  kids="$(ps -o pid= --ppid "$1" 2>/dev/null | tr -d ' ' || true)"
  for k in $kids; do echo "$k"; descendants "$k"; done
}

any_alive() { local p; for p in "$@"; do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }

wait_gone() {  # wait_gone SECONDS PID...: until none is alive or the time is up
  local n=$(( $1 * 5 )); shift
  while [ "$n" -gt 0 ] && any_alive "$@"; do sleep 0.2; n=$(( n - 1 )); done
}

# SIGTERM to the API server alone first (it shuts its engine core and worker down in order),
# then SIGTERM to the descendants still there, then SIGKILL by pid to whatever is left
stop_tree() {
  local root="$1" pids p
  pids="$root $(descendants "$root" | tr '\n' ' ')"
  kill -TERM "$root" 2>/dev/null || true
  wait_gone 10 $pids
  for p in $pids; do kill -TERM "$p" 2>/dev/null || true; done
  wait_gone 3 $pids
  for p in $pids; do
    if kill -0 "$p" 2>/dev/null; then echo "SIGKILL $p (survived SIGTERM)" >&2; kill -KILL "$p" 2>/dev/null || true; fi
  done
}

cmd="start"
case "${1:-}" in start|stop) cmd="$1"; shift ;; esac
if [ "$cmd" = stop ]; then
  [ $# -ge 1 ] || { echo "usage: $0 stop PID" >&2; exit 2; }
  stop_tree "$1"
  exit 0
fi

PORT=8765
MODEL="$VENV/tiny-llama"
LOG=""
TIMEOUT=300
while [ $# -gt 0 ]; do
  case "$1" in
    --port) PORT="$2"; shift 2 ;;
    --model) MODEL="$2"; shift 2 ;;
    --log) LOG="$2"; shift 2 ;;
    --timeout) TIMEOUT="$2"; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
LOG="${LOG:-/tmp/vllm-server-$PORT.log}"
[ -x "$VENV/bin/python" ] || { echo "no $VENV: run scripts/vllm/setup.sh first" >&2; exit 1; }
[ -f "$MODEL/config.json" ] || { echo "no model in $MODEL: run scripts/vllm/setup.sh first" >&2; exit 1; }

# setsid: the server and its children in a session of their own, away from our terminal's signals
VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=auto setsid "$VENV/bin/python" \
  -m vllm.entrypoints.openai.api_server --model "$MODEL" --max-model-len 256 \
  --dtype float32 --port "$PORT" ${VLLM_EXTRA_ARGS:-} > "$LOG" 2>&1 < /dev/null &
PID=$!
trap 'stop_tree "$PID"; exit 130' INT TERM  # interrupted while waiting: leave nothing behind
echo "vLLM API server pid $PID, port $PORT, log $LOG: waiting for /health (up to ${TIMEOUT} s)" >&2
start=$(date +%s)
while true; do
  if ! kill -0 "$PID" 2>/dev/null; then
    echo "the server exited before it was ready; the end of $LOG:" >&2
    tail -n 30 "$LOG" >&2
    exit 1
  fi
  if curl -fsS -o /dev/null --max-time 2 "http://127.0.0.1:$PORT/health" 2>/dev/null; then
    break
  fi
  if [ $(( $(date +%s) - start )) -ge "$TIMEOUT" ]; then
    echo "not ready after ${TIMEOUT} s: stopping it; the end of $LOG:" >&2
    tail -n 30 "$LOG" >&2
    stop_tree "$PID"
    exit 1
  fi
  sleep 1
done
trap - INT TERM
echo "ready after $(( $(date +%s) - start )) s" >&2
echo "ready pid=$PID port=$PORT log=$LOG"
