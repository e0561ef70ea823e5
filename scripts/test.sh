#!/usr/bin/env bash
# The project's test command (README.md and .ci/run both run exactly this):
# formatting, vet, every package's tests, the race detector on the packages
# that run goroutines, and the deployment checks.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOFLAGS="${GOFLAGS:--buildvcs=false}"

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.git/*'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

echo "== go vet"
go vet ./...

echo "== staticcheck"
go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

# Packages whose code runs goroutines or touches sockets concurrently get the
# race detector; the sans-I/O and simulator packages are single-threaded by
# design and run without it (they are also the slowest under -race).
race_re='/(tunnel|netio|region|gateway|loadtest|conformance|metrics|host|stream|forward|filecopy)(/|$)'
all=$(go list ./...)
race=$(echo "$all" | grep -E "$race_re" || true)
plain=$(echo "$all" | grep -vE "$race_re" || true)

# The deployment checks come first: they install Terraform and promtool when
# they are missing (promtool checks the Prometheus rules and runs their unit
# tests), and the Go tests of deploy/ use both.
echo "== deploy checks"
bash .ci/deploy-checks.sh

echo "== go test"
# sim/scenario asserts the CC targets at their default scale (~3 min of CPU
# alone); on a busy 2-core machine that package alone can pass the default
# 10-minute per-package limit, so give it room rather than shrink the scale.
go test -count=1 -timeout 20m $plain
if [ -n "$race" ]; then
  echo "== go test -race"
  go test -count=1 -race $race
fi

# Tests that measure shares of an emulated WAN need the WAN, not the CPU,
# to be the bottleneck, so they skip themselves under -race; run them once
# without it.
echo "== go test (WAN-bound tests, without -race)"
go test -count=1 -run 'TestClassWeightsShareTheWAN' ./gateway
go test -count=1 -run 'TestRTTFairnessRows|TestPlaneFailureRows' ./loadtest/peers

echo "all checks passed"
