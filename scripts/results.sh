#!/usr/bin/env bash
# Regenerates docs/RESULTS.md from docs/results/RESULTS.tmpl.md: every line of
# the form `<!-- run: mrgw-lab ARGS -->` is replaced by the command line and its
# output (the tables), produced by a freshly built mrgw-lab (the lab binary:
# sim, loadtest) on this machine. Before that it regenerates the
# congestion-control rows, plots and page (docs/results/<scenario>.jsonl,
# *.svg, cc.md) with `mrgw-lab sim --results docs/results`.
# Usage: bash scripts/results.sh            (everything; tens of minutes)
#        ONLY='sim planes' bash scripts/results.sh   (re-run matching commands only; others keep their old output)
set -euo pipefail
cd "$(dirname "$0")/.."
tmpl=docs/results/RESULTS.tmpl.md
out=docs/RESULTS.md
bin=$(mktemp -d)/mrgw-lab
go build -o "$bin" ./cmd/mrgw-lab
cache=docs/results/.cache
mkdir -p "$cache"

# The congestion-control results page and its rows; with ONLY set, only if
# the command matches it (the rows on disk are kept otherwise).
cc_args="sim --results docs/results utilization rtt-fairness convergence incast multipath-coupling loss-sweep-cc"
if [ -z "${ONLY:-}" ] || [[ "$cc_args" == *"${ONLY}"* ]]; then
  echo "running: mrgw-lab $cc_args" >&2
  "$bin" $cc_args --quiet > /dev/null
fi

machine="$(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(uname -sr), $(go version | awk '{print $3}')"

{
  while IFS= read -r line; do
    if [[ $line =~ ^\<\!--\ run:\ mrgw-lab\ (.*)\ --\>$ ]]; then
      args=${BASH_REMATCH[1]}
      key=$(echo "$args" | tr -c 'a-zA-Z0-9' '_')
      if [ -z "${ONLY:-}" ] || [[ "$args" == *"${ONLY}"* ]] || [ ! -f "$cache/$key" ]; then
        echo "running: mrgw-lab $args" >&2
        "$bin" $args --quiet > "$cache/$key.tmp" && mv "$cache/$key.tmp" "$cache/$key"
      fi
      echo "Command: \`mrgw-lab $args\`"
      echo
      sed "/^## /d" "$cache/$key"
    elif [[ $line == '<!-- machine -->' ]]; then
      echo "Machine: $machine; generated $(date -u +%Y-%m-%d)."
    else
      echo "$line"
    fi
  done < "$tmpl"
} > "$out.tmp"
mv "$out.tmp" "$out"
echo "wrote $out" >&2
