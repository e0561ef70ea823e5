#!/usr/bin/env bash
# Deployment checks, called from scripts/test.sh:
#   promtool check rules, test rules (deploy/prometheus/alerts_test.yml: each
#   alert fires on the series it is written for) and check config
#   terraform fmt -check -recursive deploy/terraform
#   terraform init -backend=false && terraform validate, for each module and the example
#   terraform plan of the two-region example (render only: deploy = false, no host contacted)
# Terraform runs on copies in a temporary directory, so no .terraform or
# state is left in the work tree. Exits non-zero on the first failure.
#
# Terraform: $TERRAFORM, else `terraform` on PATH, else the copy this script
# installed before, else it installs one from the Go module proxy with
# `go install` (about 10 minutes the first time). Terraform 1.6 and later
# cannot be installed that way (their go.mod has replace directives, which
# `go install pkg@version` refuses), so the fallback is v1.5.7, the newest
# that builds; the modules require >= 1.5 for that reason.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
fallback_version=1.5.7
cache="${XDG_CACHE_HOME:-$HOME/.cache}/mrgw/terraform-$fallback_version"

# promtool: $PROMTOOL, else `promtool` on PATH, else Debian's prometheus
# package is installed (it ships /usr/bin/promtool; the service it also
# ships is not started: policy-rc.d refuses it during the install).
promtool="${PROMTOOL:-}"
if [[ -z "$promtool" ]]; then
  if command -v promtool >/dev/null 2>&1; then
    promtool=$(command -v promtool)
  else
    echo "deploy-checks: promtool not found; installing Debian's prometheus package" >&2
    sudo=""
    if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
    policy=""
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
      printf '#!/bin/sh\nexit 101\n' | $sudo tee /usr/sbin/policy-rc.d >/dev/null
      $sudo chmod 0755 /usr/sbin/policy-rc.d
      policy=/usr/sbin/policy-rc.d
    fi
    $sudo apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
    if [[ -n "$policy" ]]; then $sudo rm -f "$policy"; fi
    promtool=/usr/bin/promtool
  fi
fi
export PROMTOOL="$promtool"
echo "deploy-checks: $("$promtool" --version 2>&1 | head -n1)"
echo "deploy-checks: promtool check rules, test rules, check config (deploy/prometheus)"
(cd "$root/deploy/prometheus" &&
  "$promtool" check rules alerts.yml &&
  "$promtool" test rules alerts_test.yml &&
  "$promtool" check config --syntax-only prometheus.yml)

tf="${TERRAFORM:-}"
if [[ -z "$tf" ]]; then
  if command -v terraform >/dev/null 2>&1; then
    tf=$(command -v terraform)
  elif [[ -x "$cache/terraform" ]]; then
    tf="$cache/terraform"
  else
    echo "deploy-checks: terraform not found; installing v$fallback_version from the Go module proxy into $cache" >&2
    mkdir -p "$cache"
    # Outside the repository, so its go.mod is neither read nor changed.
    (cd "$(mktemp -d)" && GOFLAGS= GOBIN="$cache" go install "github.com/hashicorp/terraform@v$fallback_version")
    tf="$cache/terraform"
  fi
fi
export TERRAFORM="$tf"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
: >"$work/terraformrc"
export TF_IN_AUTOMATION=1 TF_INPUT=0 CHECKPOINT_DISABLE=1 TF_CLI_CONFIG_FILE="$work/terraformrc"

echo "deploy-checks: $("$tf" version | head -n1)"

echo "deploy-checks: terraform fmt -check -recursive deploy/terraform"
"$tf" fmt -check -recursive -diff "$root/deploy/terraform"

cp -r "$root/deploy/terraform" "$root/deploy/systemd" "$work/"
rm -rf "$work"/terraform/**/.terraform 2>/dev/null || true

for dir in modules/gateway-host modules/gateway-region examples/two-region; do
  echo "deploy-checks: init + validate deploy/terraform/$dir"
  (cd "$work/terraform/$dir" &&
    "$tf" init -backend=false -input=false -no-color >/dev/null &&
    "$tf" validate -no-color)
done

echo "deploy-checks: plan deploy/terraform/examples/two-region (render only)"
(cd "$work/terraform/examples/two-region" &&
  "$tf" plan -input=false -no-color -lock=false -var-file=terraform.tfvars.example -out="$work/two-region.plan" >"$work/plan.log" ||
  { cat "$work/plan.log" >&2; exit 1; })
tail -n 3 "$work/plan.log"

# The plan renders five gateways (two in eu-west, three in us-east) and
# installs nothing.
(cd "$work/terraform/examples/two-region" && "$tf" show -json "$work/two-region.plan") >"$work/plan.json"
rendered=$(grep -o '"address":"module.region\[\\"[a-z-]*\\"\].terraform_data.config\[\\"[a-z0-9-]*\\"\]"' "$work/plan.json" | sort -u | wc -l)
installs=$({ grep -o 'terraform_data.install\[0\]' "$work/plan.json" || true; } | wc -l)
if [[ "$rendered" -ne 5 || "$installs" -ne 0 ]]; then
  echo "deploy-checks: plan renders $rendered gateway configurations (want 5) and has $installs install resources (want 0)" >&2
  exit 1
fi
echo "deploy-checks: ok (5 gateway configurations rendered, nothing installed; go test ./deploy checks them with mrgw config check)"
