#!/usr/bin/env bash
# Fetches the Apache Kafka jars of one release (broker, tools, the Java client
# and their runtime dependencies) from Maven Central with mvn, once, into the
# user cache directory, and prints the directory that holds them. The fetch
# itself is devcluster.FetchKafka, which `kmirror dev-cluster --engine kafka`
# runs too; this script only makes sure java and mvn are there first.
#   tools/install-kafka.sh [VERSION]     default: KMIRROR_KAFKA_VERSION, else the engine's default
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
command -v mvn >/dev/null 2>&1 || need+=(maven)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then echo "install-kafka: need root to install ${need[*]}" >&2; exit 1; fi
  echo "installing ${need[*]} from Debian packages..." >&2
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
exec go run ./agent/cmd/kmirror dev-cluster --engine kafka --fetch-only ${1:+--kafka-version "$1"}
