#!/usr/bin/env bash
# Runs the project's test command (scripts/test.sh) with CPU hogs beside it,
# the way a small, busy CI machine runs it: a test that fails here is a
# defect (it waits on wall-clock time instead of progress).
#
#   bash scripts/test-busy.sh            # two hogs, one run
#   HOGS=4 RUNS=2 bash scripts/test-busy.sh
#
# The hogs are Go busy loops (no extra package needed); they stop when the
# run ends, however it ends.
set -euo pipefail
cd "$(dirname "$0")/.."
hogs=${HOGS:-2}
runs=${RUNS:-1}

hogdir=$(mktemp -d)
cat >"$hogdir/main.go" <<'GO'
package main

import "time"

// A busy loop that gives up after an hour at most, so a hog can never
// outlive a forgotten run.
func main() {
	end := time.Now().Add(time.Hour)
	x := uint64(1)
	for time.Now().Before(end) {
		for i := 0; i < 1e6; i++ {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	println(x)
}
GO
(cd "$hogdir" && GO111MODULE=off go build -o hog main.go)

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$hogdir"
}
trap cleanup EXIT
for _ in $(seq "$hogs"); do "$hogdir/hog" >/dev/null 2>&1 & pids+=($!); done

for r in $(seq "$runs"); do
  echo "== busy run $r of $runs ($hogs hogs; load: $(cut -d' ' -f1-3 /proc/loadavg))"
  bash scripts/test.sh
done
echo "== $runs busy run(s) passed with $hogs hogs (load: $(cut -d' ' -f1-3 /proc/loadavg))"
