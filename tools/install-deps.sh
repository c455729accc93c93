#!/usr/bin/env bash
# Installs what the tests need beyond Go, once, into the machine or the user
# cache directory (so a fresh clone and CI reuse it):
#  - kcat from Debian's packages (an independent client, librdkafka);
#  - a Java runtime, javac and Maven from Debian's packages when missing;
#  - the Apache Kafka jars of the releases `make test` runs (KAFKA_VERSIONS),
#    from Maven Central with mvn (tools/install-kafka.sh);
#  - librdkafka through confluent-kafka from PyPI, in a virtualenv
#    (tools/install-rdkafka.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v kcat >/dev/null 2>&1 || need+=(kcat)
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
command -v javac >/dev/null 2>&1 || need+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null 2>&1 || need+=(maven)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then echo "need root to install: ${need[*]}" >&2; exit 1; fi
  echo "installing ${need[*]} from Debian packages..." >&2
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
for v in ${KAFKA_VERSIONS:-4.4.0 3.9.2}; do
  ./tools/install-kafka.sh "$v" >/dev/null
done
./tools/install-rdkafka.sh >/dev/null
