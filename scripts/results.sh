#!/usr/bin/env bash
# Builds the results pages from their templates: docs/results/RESULTS.tmpl.md makes docs/RESULTS.md,
# and every other docs/results/NAME.tmpl.md makes docs/results/NAME.md. In a template, every line
# `<!-- run: mrgw-lab ARGS -->` is replaced by the command line and its output (the tables), kept in
# docs/results/out/ so that the pages can be re-assembled without re-running anything. A load test's
# stored output ends with the machine's load average before and after it: real-socket figures are
# only comparable on a quiet machine. A command that exits non-zero (a target it checks not met)
# keeps its output, followed by its exit status.
#
# Usage:
#   bash scripts/results.sh --assemble         re-assemble from the stored outputs; runs nothing.
#                                              A page with a stored output missing is left as it
#                                              is and the missing commands are named on stderr;
#                                              exit status 1 only when no page could be built
#   bash scripts/results.sh                    re-run every command (hours with the load tests), then
#                                              assemble
#   PAGE=fleet bash scripts/results.sh         only the page docs/results/fleet.tmpl.md makes
#                                              (PAGE=RESULTS: docs/RESULTS.md; PAGE=cc: cc.md alone)
#   ONLY='sim planes' bash scripts/results.sh  re-run the commands containing ONLY, and any whose
#                                              output is missing; keep the others' stored output
#
# A full run (no PAGE, no ONLY), PAGE=cc or an ONLY that matches it also regenerates the
# congestion-control rows, plots and page (docs/results/<scenario>.jsonl, *.svg, cc.md) with
# `mrgw-lab sim --results`.
set -euo pipefail
cd "$(dirname "$0")/.."
store=docs/results/out
mkdir -p "$store"

assemble=0
case "${1:-}" in
  --assemble) assemble=1 ;;
  "") ;;
  *) echo "usage: [PAGE=NAME] [ONLY=TEXT] bash scripts/results.sh [--assemble]" >&2; exit 2 ;;
esac

# The templates (those of PAGE only, when set), and the page each makes.
templates=()
for t in docs/results/RESULTS.tmpl.md docs/results/*.tmpl.md; do
  name=$(basename "$t" .tmpl.md)
  if [ -n "${PAGE:-}" ] && [ "$name" != "$PAGE" ]; then continue; fi
  [[ " ${templates[*]:-} " == *" $t "* ]] || templates+=("$t")
done
if [ ${#templates[@]} = 0 ] && [ "${PAGE:-}" != cc ]; then
  echo "no template docs/results/${PAGE}.tmpl.md" >&2
  exit 2
fi
page() {
  if [ "$1" = docs/results/RESULTS.tmpl.md ]; then echo docs/RESULTS.md; else echo "${1%.tmpl.md}.md"; fi
}

key() { printf '%s' "$1" | tr -c 'a-zA-Z0-9' '_'; }
load1() { cut -d' ' -f1 /proc/loadavg; }
markers() { grep -h -E '^<!-- run: mrgw-lab .* -->$' "$@" | sed -E 's/^<!-- run: mrgw-lab (.*) -->$/\1/'; }

if [ "$assemble" = 0 ]; then
  bin=$(mktemp -d)/mrgw-lab
  go build -o "$bin" ./cmd/mrgw-lab
  ran=0
  cc_args="sim --results docs/results utilization rtt-fairness convergence incast multipath-coupling loss-sweep-cc"
  if { [ -z "${PAGE:-}" ] && { [ -z "${ONLY:-}" ] || [[ "$cc_args" == *"${ONLY}"* ]]; }; } || [ "${PAGE:-}" = cc ]; then
    echo "running: mrgw-lab $cc_args" >&2
    "$bin" $cc_args --quiet > /dev/null
    ran=1
  fi
  if [ ${#templates[@]} -gt 0 ]; then
    while IFS= read -r args; do
      f="$store/$(key "$args").txt"
      if [ -z "${ONLY:-}" ] || [[ "$args" == *"${ONLY}"* ]] || [ ! -f "$f" ]; then
        echo "running: mrgw-lab $args" >&2
        before=$(load1)
        quiet=
        if "$bin" $args --help 2>/dev/null | grep -q -- '--quiet'; then quiet=--quiet; fi
        status=0
        "$bin" $args $quiet > "$f.raw" || status=$?
        sed '/^## /d' "$f.raw" > "$f.tmp"
        rm -f "$f.raw"
        if [ "$status" != 0 ]; then
          printf '\nExit status %s.\n' "$status" >> "$f.tmp"
          echo "mrgw-lab $args: exit status $status (output kept)" >&2
        fi
        if [[ "$args" == loadtest* ]]; then
          printf '\nLoad average (1 min) %s before, %s after; run %s.\n' "$before" "$(load1)" "$(date -u +%Y-%m-%d)" >> "$f.tmp"
        fi
        mv "$f.tmp" "$f"
        ran=1
      fi
    done < <(markers "${templates[@]}" | awk '!seen[$0]++')
  fi
  # The machine line names the machine of the last run that ran anything.
  if [ "$ran" = 1 ]; then
    printf '%s\n' "$(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(uname -sr), $(go version | awk '{print $3}'); run $(date -u +%Y-%m-%d)" > "$store/machine.txt"
  fi
fi

built=0
for tmpl in "${templates[@]}"; do
  out=$(page "$tmpl")
  # A page is built only from a complete set of stored outputs.
  missing=0
  while IFS= read -r args; do
    if [ ! -f "$store/$(key "$args").txt" ]; then
      echo "$out: no stored output for 'mrgw-lab $args'; page left as it is" >&2
      missing=1
    fi
  done < <(markers "$tmpl")
  if grep -q '^<!-- machine -->$' "$tmpl" && [ ! -f "$store/machine.txt" ]; then
    echo "$out: no $store/machine.txt; page left as it is" >&2
    missing=1
  fi
  [ "$missing" = 0 ] || continue
  {
    echo "<!-- Generated by scripts/results.sh from $tmpl; edit the template. -->"
    while IFS= read -r line; do
      if [[ $line =~ ^\<\!--\ run:\ mrgw-lab\ (.*)\ --\>$ ]]; then
        args=${BASH_REMATCH[1]}
        echo "Command: \`mrgw-lab $args\`"
        echo
        # The output without its leading and trailing blank lines.
        sed '/./,$!d' "$store/$(key "$args").txt" | tac | sed '/./,$!d' | tac
      elif [[ $line == '<!-- machine -->' ]]; then
        echo "Machine: $(cat "$store/machine.txt")."
      else
        echo "$line"
      fi
    done < "$tmpl"
  } > "$out.tmp"
  mv "$out.tmp" "$out"
  echo "wrote $out" >&2
  built=$((built + 1))
done
if [ ${#templates[@]} -gt 0 ] && [ "$built" = 0 ]; then
  echo "no page could be built" >&2
  exit 1
fi
