#!/usr/bin/env bash
# make demo: two Kafka clusters, the agent, live lag, and the same records at
# the same offsets on both sides. The clusters are embedded (kfake) unless
# KMIRROR_ENGINE=kafka, which runs Apache Kafka brokers (KMIRROR_KAFKA_VERSION
# picks the release; the jars are fetched once into the user cache). Everything it starts is stopped
# on exit or Ctrl-C; everything it writes is under .work/demo (git-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_WATCH="${DEMO_SECONDS:-60}"
WORK=.work/demo
BIN=./bin/kmirror
ENGINE="${KMIRROR_ENGINE:-embedded}"
case "$ENGINE" in
  embedded|kafka) ;;
  *) echo "KMIRROR_ENGINE=$ENGINE: want embedded or kafka" >&2; exit 2 ;;
esac
mkdir -p "$WORK"
rm -f "$WORK"/*.log "$WORK"/pids

# step TEXT: a heading, with the seconds since the demo started (bash's SECONDS).
step() { printf '\n\033[1m==> %s\033[0m (%ds)\n' "$*" "$SECONDS"; }
pids=()
cleanup() {
  local rc=$?
  if [ ${#pids[@]} -gt 0 ]; then
    step "stopping everything the demo started"
    kill "${pids[@]}" 2>/dev/null || true
    wait "${pids[@]}" 2>/dev/null || true
  fi
  rm -f "$WORK/pids"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# free_ports N: first base port from 20000 up with N consecutive free ports.
free_ports() {
  local n=$1 base=${2:-20000}
  while :; do
    local ok=1
    for ((i = 0; i < n; i++)); do port_free $((base + i)) || { ok=0; break; }; done
    [ $ok = 1 ] && { echo "$base"; return; }
    base=$((base + n + 10))
  done
}
start() { # start NAME CMD...: run in the background, log to $WORK/NAME.log
  local name=$1; shift
  "$@" >"$WORK/$name.log" 2>&1 &
  pids+=($!)
  echo $! >>"$WORK/pids"
}
wait_for() { # wait_for FILE PATTERN SECONDS
  for ((i = 0; i < $3 * 10; i++)); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "timed out waiting for '$2' in $1:" >&2; tail -20 "$1" >&2; return 1
}

step "building bin/kmirror"
make -s build

SRC_PORT=$(free_ports 3 19092)
DST_PORT=$(free_ports 1 $((SRC_PORT + 100)))
API_PORT=$(free_ports 1 18080)
step "starting the source cluster (3 brokers on 127.0.0.1:$SRC_PORT-$((SRC_PORT + 2))) and the destination cluster (127.0.0.1:$DST_PORT), engine $ENGINE"
start source "$BIN" dev-cluster --engine "$ENGINE" --name source --brokers 3 --port "$SRC_PORT"
start destination "$BIN" dev-cluster --engine "$ENGINE" --name destination --brokers 1 --port "$DST_PORT"
# Kafka brokers are JVMs (and a first run fetches their jars).
ready=30; [ "$ENGINE" = kafka ] && ready=300
wait_for "$WORK/source.log" '^bootstrap: ' $ready
wait_for "$WORK/destination.log" '^bootstrap: ' $ready
SRC=$(sed -n 's/^bootstrap: //p' "$WORK/source.log")
DST=$(sed -n 's/^bootstrap: //p' "$WORK/destination.log")
echo "source:      $SRC"
echo "destination: $DST"

step "seeding three topics on the source, each with a producer running"
echo "orders:    3 partitions, all five codecs, 2000 records/s"
echo "payments:  transactional (every 4th transaction aborted), 500 records/s"
echo "customers: compacted (cleanup.policy=compact, 200 keys), 500 records/s"
start orders-producer "$BIN" dev-load --bootstrap "$SRC" --topic orders --partitions 3 --rate 2000
producers=("${pids[-1]}")
start payments-producer "$BIN" dev-load --bootstrap "$SRC" --topic payments --partitions 3 --rate 500 --transactional-id payments --abort-every 4
producers+=("${pids[-1]}")
start customers-producer "$BIN" dev-load --bootstrap "$SRC" --topic customers --partitions 3 --rate 500 --compacted --keys 200
producers+=("${pids[-1]}")
# A producer that stopped or stalled (a topic it could not create, a broker it
# could not reach, no producer id) would leave its topic empty and the demo
# quietly showing lag 0: each must have its first records acknowledged.
check_producers() { # check_producers WHEN: fail when a producer is gone
  local i=0
  for name in orders payments customers; do
    if ! kill -0 "${producers[$i]}" 2>/dev/null; then
      echo "the $name producer stopped $1; its log ends:" >&2; tail -20 "$WORK/$name-producer.log" >&2; exit 1
    fi
    i=$((i + 1))
  done
}
for name in orders payments customers; do
  wait_for "$WORK/$name-producer.log" '^first records acknowledged' $ready
done
check_producers "after its first records"

step "starting the agent (API on 127.0.0.1:$API_PORT), writing to the destination"
cat >"$WORK/agent.hcl" <<HCL
destination {
  bootstrap_servers = [$(echo "$DST" | sed 's/[^,]*/"&"/g')]
}
listen = "127.0.0.1:$API_PORT"
metadata_refresh_interval = "5s"
HCL
start agent "$BIN" agent --config "$WORK/agent.hcl"
export KMIRROR_ADDR="http://127.0.0.1:$API_PORT"
for ((i = 0; i < 100; i++)); do "$BIN" describe >/dev/null 2>&1 && break; sleep 0.2; done

step "terraform apply examples/quickstart: mirror 'dr' (source -> destination) with topics 'orders', 'payments' and 'customers'"
TF=$(./tools/install-terraform.sh)
# The provider is the one just built: a dev override, so nothing is downloaded.
cat >"$WORK/terraformrc" <<RC
provider_installation {
  dev_overrides {
    "kmirror/kafka" = "$PWD/bin"
  }
  direct {}
}
RC
rm -rf "$WORK/quickstart" && cp -r examples/quickstart "$WORK/quickstart"
# tf_apply ARGS...: terraform apply in the quickstart copy; prints the summary
# lines, or everything when it fails.
tf_apply() {
  if ! (
    cd "$WORK/quickstart"
    TF_CLI_CONFIG_FILE="$PWD/../terraformrc" TF_IN_AUTOMATION=1 "$TF" apply -auto-approve -input=false -no-color \
      -var "agent_url=$KMIRROR_ADDR" \
      -var "source_bootstrap_servers=[$(echo "$SRC" | sed 's/[^,]*/"&"/g')]" "$@"
  ) >"$WORK/terraform.log" 2>&1; then
    cat "$WORK/terraform.log" >&2
    echo "terraform apply failed (log: $WORK/terraform.log)" >&2
    exit 1
  fi
  grep -E "Creating|Creation complete|Modifying|Modifications complete|Apply complete" "$WORK/terraform.log"
}
tf_apply
"$BIN" describe --mirror dr >/dev/null || { echo "terraform apply did not create mirror dr" >&2; exit 1; }

step "live lag for ${SECONDS_TO_WATCH}s (kmirror describe --watch 5s)"
"$BIN" describe --watch 5s --count $(( (SECONDS_TO_WATCH + 4) / 5 ))

step "stopping the producers and waiting for lag 0"
check_producers "while the demo watched"
kill "${producers[@]}" 2>/dev/null || true
wait "${producers[@]}" 2>/dev/null || true
# Lag 0 counts only once every partition is MIRRORING: a partition still
# INITIALIZING reports no lag yet.
for ((i = 0; i < 600; i++)); do
  json=$("$BIN" describe --output json)
  lag=$(echo "$json" | sed -n 's/.*"max_lag": \([0-9]*\).*/\1/p' | head -1)
  [ "$lag" = 0 ] && ! echo "$json" | grep -qE '"state": "(INITIALIZING|PREPARING)"' && break
  sleep 0.2
done
"$BIN" describe

step "the same offset on both clusters, read by an independent client (kcat / librdkafka)"
if command -v kcat >/dev/null 2>&1; then
  for side in "source $SRC" "destination $DST"; do
    set -- $side
    printf '%-12s ' "$1"
    kcat -C -b "$2" -t orders -p 1 -o 500 -c 1 -e -q -f 'partition %p offset %o key %k timestamp %T\n'
  done
else
  echo "(kcat not installed: apt-get install kcat)"
fi
step "kmirror verify: every partition of every topic record for record, at both isolation levels"
for topic in orders payments customers; do
  if ! report=$("$BIN" verify --source-bootstrap "$SRC" --destination-bootstrap "$DST" --topic "$topic" --key-aware); then
    echo "$report" >&2
    exit 1
  fi
  echo "${report%%$'\n'*}" # the verdict line
done
have_kcat() { command -v kcat >/dev/null 2>&1; }
# group_offsets FILE LABEL VERB: from "PARTITION OFFSET" lines, the next offset
# (VERB "next") or first offset (VERB "resumes") per partition.
group_offsets() {
  awk -v label="$2" -v verb="$3" '
    { if (verb == "next") { if (!($1 in o) || $2 + 1 > o[$1]) o[$1] = $2 + 1 } else { if (!($1 in o) || $2 < o[$1]) o[$1] = $2 } }
    END { for (p in o) printf "%-12s group billing: partition %s %s offset %d\n", label, p, (verb == "next" ? "next" : "resumes at"), o[p] }' "$1" | sort
}
if have_kcat; then
  step "an application: consumer group 'billing' reads 300 records of 'orders' on the source and commits (kcat -G)"
  kcat -b "$SRC" -G billing -X auto.offset.reset=earliest -X max.partition.fetch.bytes=4096 -c 300 -e -q -f '%p %o\n' orders >"$WORK/billing-source.txt"
  group_offsets "$WORK/billing-source.txt" source next
fi

step "failover: terraform apply -var orders_state=stopped"
tf_apply -var orders_state=stopped
"$BIN" describe

if have_kcat; then
  step "the application moves to the destination: group 'billing' resumes at the offsets it committed on the source (synced, no translation)"
  kcat -b "$DST" -G billing -X auto.offset.reset=earliest -e -q -f '%p %o\n' orders >"$WORK/billing-destination.txt"
  group_offsets "$WORK/billing-destination.txt" destination resumes
fi

step "the destination topic is writable now: a new record lands right after the last mirrored offset"
"$BIN" dev-load --bootstrap "$DST" --topic orders --records 3 --rate 0 >/dev/null
if have_kcat; then
  kcat -C -b "$DST" -t orders -p 1 -o -1 -c 1 -e -q -f 'destination  partition %p offset %o (new write after failover)\n'
fi
step "done: every record sits at the same offset on the destination; 'orders' takes writes there now, 'payments' and 'customers' still mirror"
