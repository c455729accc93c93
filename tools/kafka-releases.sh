#!/usr/bin/env bash
# Prints every Apache Kafka release 3.9.x and 4.x that Maven Central serves
# (org.apache.kafka:kafka_2.13), oldest first, then the newest again with
# -tv1 (formatted with transaction.version=1): make test-matrix's list.
# Without Maven Central, the list known when this was written.
set -euo pipefail
meta=https://repo1.maven.org/maven2/org/apache/kafka/kafka_2.13/maven-metadata.xml
if vs=$(curl -fsS --max-time 20 "$meta" 2>/dev/null | grep -o '<version>[^<]*</version>' | sed 's/<[^>]*>//g' |
  grep -E '^(3\.9|4)\.[0-9]+(\.[0-9]+)?$' | sort -V) && [ -n "$vs" ]; then
  :
else
  echo "kafka-releases: Maven Central unreachable; using the list of 2026-12" >&2
  vs="3.9.0 3.9.1 3.9.2 4.0.0 4.0.1 4.0.2 4.1.0 4.1.1 4.1.2 4.2.0 4.2.1 4.2.2 4.3.0 4.3.1 4.3.2 4.4.0"
fi
newest=$(echo $vs | tr ' ' '\n' | tail -1)
echo $vs "$newest-tv1"
