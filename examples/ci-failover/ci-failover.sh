#!/usr/bin/env bash
# ci-failover.sh: a failover drill a CI job can run against the
# configuration in this directory (main.tf), already applied with
# topic_state = "mirroring".
#
#   1. drift check: terraform plan -detailed-exitcode must find nothing to
#      change (a topic paused, stopped or removed outside Terraform fails
#      the job here, exit 2);
#   2. promotion: terraform apply -var topic_state=promoted, which waits
#      until the destination has everything the source acknowledged, then
#      stops mirroring;
#   3. check: the topic is writable on the destination (one record
#      produced and read back, with kcat, else `kmirror dev-load`).
#
# Environment:
#   DEST_BOOTSTRAP  destination brokers HOST:PORT[,...] (required)
#   TF_DIR          the Terraform directory (default: this script's)
#   TERRAFORM       terraform or tofu binary (default: terraform)
#   KCAT, KMIRROR   kcat and kmirror binaries (default: from PATH)
#   TF_VAR_*        the configuration's variables (agent_url, source_bootstrap, token, topic)
# Exit codes: 0 promoted and writable, 2 drift, 3 promotion or check
# failed, 1 anything else.
set -euo pipefail

tf=${TERRAFORM:-terraform}
dir=${TF_DIR:-$(cd "$(dirname "$0")" && pwd)}
: "${DEST_BOOTSTRAP:?set DEST_BOOTSTRAP to the destination brokers}"
export TF_IN_AUTOMATION=1

step() { printf '\n== %s\n' "$*"; }

step "terraform init"
"$tf" -chdir="$dir" init -input=false -no-color >/dev/null

step "drift check (plan -detailed-exitcode)"
set +e
"$tf" -chdir="$dir" plan -input=false -no-color -detailed-exitcode -lock-timeout=60s
rc=$?
set -e
case $rc in
0) echo "no drift" ;;
2)
  echo "DRIFT: the mirror differs from the configuration (see the plan above); not failing over" >&2
  exit 2
  ;;
*)
  echo "plan failed (exit $rc)" >&2
  exit 1
  ;;
esac

step "promote (apply -var topic_state=promoted)"
if ! "$tf" -chdir="$dir" apply -input=false -no-color -auto-approve -var topic_state=promoted; then
  echo "promotion failed" >&2
  exit 3
fi
topic=$("$tf" -chdir="$dir" output -raw -no-color topic)
state=$("$tf" -chdir="$dir" output -raw -no-color topic_state)
if [ "$state" != promoted ]; then
  echo "topic $topic is $state after the apply, want promoted" >&2
  exit 3
fi
echo "final offsets (destination_offset: where each partition ended):"
"$tf" -chdir="$dir" state show -no-color kafka_mirror_topic.this

step "check that $topic is writable on the destination"
marker="ci-failover-$(date +%s)-$$"
kcat=${KCAT:-$(command -v kcat || true)}
if [ -n "$kcat" ]; then
  if ! printf '%s\n' "$marker" | "$kcat" -P -b "$DEST_BOOTSTRAP" -t "$topic" -p 0 -X message.timeout.ms=15000; then
    echo "producing to $topic on the destination failed" >&2
    exit 3
  fi
  last=$("$kcat" -C -b "$DEST_BOOTSTRAP" -t "$topic" -p 0 -o -1 -e -q -f '%s\n' || true)
  if [ "$last" != "$marker" ]; then
    echo "destination $topic/0 ends with \"$last\", not the record just written (\"$marker\")" >&2
    exit 3
  fi
else
  kmirror=${KMIRROR:-kmirror}
  if ! "$kmirror" dev-load --bootstrap "$DEST_BOOTSTRAP" --topic "$topic" --records 1 --rate 0; then
    echo "producing to $topic on the destination failed" >&2
    exit 3
  fi
fi
echo "$topic is promoted and writable on the destination"
