#!/usr/bin/env bash
# Creates, once, a Python virtualenv in the user cache directory holding
# confluent-kafka from PyPI (its wheel bundles librdkafka), and prints the
# path of the virtualenv's python. Package rdkafka runs its client script
# with it; a fresh clone (and CI) reuses what an earlier run installed.
#   tools/install-rdkafka.sh          CONFLUENT_KAFKA_VERSION overrides the pin
set -euo pipefail
version="${CONFLUENT_KAFKA_VERSION:-2.16.1}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/kmirror/rdkafka/confluent-kafka-$version"
py="$cache/venv/bin/python"
ready() { [ -f "$cache/.complete" ] && "$py" -c 'import confluent_kafka' >/dev/null 2>&1; }
if ready; then echo "$py"; exit 0; fi
mkdir -p "$(dirname "$cache")"
# One installer at a time: tests of several packages may call this at once.
exec 9>"$cache.lock"
flock 9
if ready; then echo "$py"; exit 0; fi
command -v python3 >/dev/null 2>&1 || {
  if [ "$(id -u)" = 0 ]; then
    echo "installing Python 3 from Debian packages..." >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv >/dev/null
  else
    echo "install-rdkafka: python3 is missing; install it (apt-get install python3 python3-venv)" >&2; exit 1
  fi
}
echo "installing confluent-kafka $version from PyPI into $cache/venv (once)..." >&2
rm -rf "$cache"
mkdir -p "$cache"
if ! python3 -m venv "$cache/venv" >"$cache/venv.log" 2>&1; then
  # Debian's python3 needs python3-venv for ensurepip.
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing python3-venv from Debian packages..." >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    rm -rf "$cache/venv"
    python3 -m venv "$cache/venv" >"$cache/venv.log" 2>&1 || { tail -20 "$cache/venv.log" >&2; exit 1; }
  else
    echo "install-rdkafka: python3 -m venv failed (apt-get install python3-venv?); its output:" >&2
    tail -20 "$cache/venv.log" >&2; exit 1
  fi
fi
# A prebuilt wheel only: building from the sdist would need librdkafka's headers.
if ! "$py" -m pip install -q --disable-pip-version-check --no-input --only-binary=:all: \
    "confluent-kafka==$version" >"$cache/pip.log" 2>&1; then
  echo "install-rdkafka: pip could not install confluent-kafka==$version; its output:" >&2
  tail -20 "$cache/pip.log" >&2
  exit 1
fi
"$py" -c 'import confluent_kafka' || { echo "install-rdkafka: confluent_kafka does not import" >&2; exit 1; }
touch "$cache/.complete"
echo "$py"
