#!/usr/bin/env bash
# The suite under load: a fresh clone of this checkout's HEAD runs `.ci/run` (the README's test
# command, venv from scratch) RUNS times in a row (default 3) while two CPU-bound processes spin
# beside it, as a busy CI machine or a developer's laptop would have them. Prints each run's
# result line and exit code; exits non-zero if any run failed.
#
#     scripts/ci_under_load.sh [RUNS]        # ~22 min a run on 2 cores
set -uo pipefail
RUNS="${1:-3}"
SRC="$(cd "$(dirname "$0")/.." && pwd)"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/infertop-under-load.XXXXXX")"
chmod 755 "$WORK"  # as a clone anywhere else: the tests that run Python as user nobody need it
hogs=()
cleanup() {
  for pid in "${hogs[@]}"; do kill "$pid" 2>/dev/null; done
  wait 2>/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM  # stop here: the EXIT trap then kills the hogs
for _ in 1 2; do
  python3 -c "while True: pass" &
  hogs+=("$!")
done
echo "under load: ${#hogs[@]} CPU-bound processes (pids ${hogs[*]}); clones in $WORK"
failed=0
for i in $(seq 1 "$RUNS"); do
  clone="$WORK/run$i"
  git clone -q "$SRC" "$clone"
  start=$(date +%s)
  (cd "$clone" && .ci/run) > "$WORK/run$i.log" 2>&1
  rc=$?
  took=$(( $(date +%s) - start ))
  summary=$(grep -E "^[0-9]+ (passed|failed)|^=+ .*(passed|failed)" "$WORK/run$i.log" | tail -1)
  echo "run $i: exit $rc after ${took} s: ${summary:-no pytest summary (see $WORK/run$i.log)}"
  [ "$rc" -eq 0 ] || failed=1
  rm -rf "$clone"  # its three venvs are 5-7 GB: three runs, and a few calls, filled the disk
done
exit "$failed"
