#!/usr/bin/env bash
# parallel.sh NAME COMMAND [NAME COMMAND]... — runs each COMMAND (a bash
# command line) at once, every line of its output prefixed with [NAME],
# waits for all, prints how long each took and exits 1 if any failed.
# make test runs its passes this way: they spend most of their time
# waiting on paced input, a broker or a browser, not on the CPU.
set -uo pipefail
set -m # each pass in a process group of its own, which INT and TERM stop whole
if (($# == 0 || $# % 2)); then
  echo "usage: parallel.sh NAME COMMAND [NAME COMMAND]..." >&2
  exit 2
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
names=() pids=()
start=$SECONDS
while (($#)); do
  name=$1 cmd=$2
  shift 2
  names+=("$name")
  (
    t0=$SECONDS
    bash -c "$cmd" 2>&1 | tee "$dir/$name.log" | sed -u "s/^/[$name] /"
    rc=${PIPESTATUS[0]}
    echo "$rc $((SECONDS - t0))" >"$dir/$name"
  ) &
  pids+=($!)
done
# On INT or TERM, stop every pass.
stop() {
  for pid in "${pids[@]}"; do kill -TERM -- "-$pid" 2>/dev/null; done
  wait
  exit 130
}
trap stop INT TERM
wait "${pids[@]}"
failed=0
for name in "${names[@]}"; do
  read -r rc secs <"$dir/$name" 2>/dev/null || { rc=1 secs=?; }
  status=ok
  ((rc == 0)) || { status="FAILED (exit $rc)"; failed=1; }
  printf '== %-8s %s in %ss\n' "$name" "$status" "$secs"
done
# The passes' lines are interleaved: repeat, after them, what each failed
# pass said about its failures, so that it is in the tail of a CI log.
for name in "${names[@]}"; do
  read -r rc _ <"$dir/$name" 2>/dev/null || rc=1
  ((rc == 0)) && continue
  echo "== $name: its failures"
  grep -E -B2 -A25 -e '^(--- FAIL|FAIL|panic:)' -e '^\s+--- FAIL' "$dir/$name.log" | tail -n 120 | sed "s/^/[$name] /"
done
printf '== all passes in %ss\n' "$((SECONDS - start))"
exit $failed
