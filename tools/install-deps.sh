#!/usr/bin/env bash
# Installs what the tests need beyond Go, from Debian's packages.
set -euo pipefail
need=()
command -v kcat >/dev/null 2>&1 || need+=(kcat)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then echo "need root to install: ${need[*]}" >&2; exit 1; fi
  echo "installing ${need[*]} from Debian packages..." >&2
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
# librdkafka through confluent-kafka (internal/rdkafka), in a virtualenv in the user cache directory.
"$(dirname "$0")/install-rdkafka.sh" >/dev/null
