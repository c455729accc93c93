#!/usr/bin/env bash
# Generates the provider documentation with tfplugindocs (pinned in
# tools/tfplugindocs/go.mod) from templates/ and examples/ into docs/, or
# into the directory given as the first argument.
#
# The provider schema comes from `terraform providers schema -json` run
# against a provider built from this tree and installed through a
# dev_overrides CLI configuration, with the terraform that
# tools/install-terraform.sh gives: nothing is downloaded besides Go modules.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/docs}"
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac

tf="$("$root/tools/install-terraform.sh")"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

cd "$root"
go build -o "$work/plugins/terraform-provider-kafka" .
cat >"$work/cli.tfrc" <<EOF
provider_installation {
  dev_overrides {
    "registry.terraform.io/kmirror/kafka" = "$work/plugins"
  }
  direct {}
}
EOF
mkdir -p "$work/schema"
cat >"$work/schema/main.tf" <<'EOF'
terraform {
  required_providers {
    kafka = { source = "kmirror/kafka" }
  }
}
EOF
# dev_overrides needs no init; terraform warns about them on stderr.
TF_CLI_CONFIG_FILE="$work/cli.tfrc" CHECKPOINT_DISABLE=1 \
  "$tf" -chdir="$work/schema" providers schema -json >"$work/schema.json" 2>"$work/schema.err" ||
  { cat "$work/schema.err" >&2; exit 1; }
# tfplugindocs looks the schema up by the bare provider name.
sed -i 's|"registry.terraform.io/kmirror/kafka":|"kafka":|' "$work/schema.json"

# tfplugindocs writes relative to --provider-dir: generate in a copy of
# templates/ and examples/, then replace the output with the result.
mkdir -p "$work/tree"
cp -r "$root/examples" "$work/tree/"
[ -d "$root/templates" ] && cp -r "$root/templates" "$work/tree/"
go tool -modfile=tools/tfplugindocs/go.mod tfplugindocs generate \
  --provider-dir "$work/tree" \
  --provider-name kafka \
  --rendered-provider-name kmirror \
  --providers-schema "$work/schema.json" \
  --website-temp-dir "$work/website" >"$work/generate.log" 2>&1 ||
  { cat "$work/generate.log" >&2; exit 1; }
rm -rf "$out"
cp -r "$work/tree/docs" "$out"
