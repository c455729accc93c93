"""The librdkafka client (through confluent-kafka) driven by package rdkafka.

One subcommand per run, one JSON object on stdout, errors on stderr with a
non-zero exit. The operations and their JSON are described in package
clientop (internal/clientop), and must stay the same as the Java client's
(internal/javaclient/KmirrorClient.java).

  produce-txn   --bootstrap B --topic T --transactional-id ID --transactions N
                --records-per-txn M --abort-every K [--partition P] [--compression C] [--value-size S]
  produce       --bootstrap B --topic T --records N [--idempotent] [--partition P] [--compression C]
                [--value-size S]
  consume-group --bootstrap B --topic T --group G --max-records N
                [--isolation read_committed|read_uncommitted] [--timeout-ms MS] [--commit]
  commit        --bootstrap B --group G --topic T --offsets p=o,p=o
and on each: [--sasl-user U --sasl-password P] (SASL PLAIN over SASL_PLAINTEXT).
"""

import argparse
import json
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

TIMEOUT_S = 30.0
# JOIN_TIMEOUT_S bounds consume_group's wait for its assignment.
JOIN_TIMEOUT_S = 60


class Failure(Exception):
    """A failure explained in its message."""


def base(a):
    conf = {
        "bootstrap.servers": a.bootstrap,
        "client.id": "kmirror-rdkafka",
        "socket.timeout.ms": 10000,
    }
    if a.sasl_user:
        conf.update({
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "PLAIN",
            "sasl.username": a.sasl_user,
            "sasl.password": a.sasl_password or "",
        })
    return conf


class Errors:
    """Collects client-level errors (error_cb); fatal and authentication
    errors fail the operation, others are only logged: librdkafka retries."""

    def __init__(self):
        self.fatal = None

    def __call__(self, err):
        print("kmirror-rdkafka: client error: %s" % err, file=sys.stderr)
        if err.fatal() or err.code() in (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED):
            self.fatal = self.fatal or err

    def check(self):
        if self.fatal is not None:
            raise Failure(str(self.fatal))


def producer_conf(a, errors):
    conf = base(a)
    conf.update({
        "acks": "all",
        "linger.ms": 5,
        "compression.type": a.compression,
        # The Java client's default partitioner, so that both clients put
        # a key in the same partition.
        "partitioner": "murmur2_random",
        "message.timeout.ms": 30000,
        "error_cb": errors,
    })
    return conf


class Deliveries:
    def __init__(self):
        self.failed = None

    def __call__(self, err, msg):
        if err is not None and self.failed is None:
            self.failed = err

    def check(self):
        if self.failed is not None:
            raise Failure("producing: %s" % self.failed)


PAD_ALPHABET = b"0123456789abcdef"
MASK64 = (1 << 64) - 1


def padded(v, size):
    """clientop.Padded: v padded to size bytes with noise seeded by v's FNV-1a hash."""
    b = v.encode()
    if len(b) >= size:
        return b
    x = 0xcbf29ce484222325
    for c in b:
        x = ((x ^ c) * 0x100000001b3) & MASK64
    out = bytearray(b)
    while len(out) < size:
        x = (x * 6364136223846793005 + 1442695040888963407) & MASK64
        out.append(PAD_ALPHABET[x >> 60])
    return bytes(out)


def send(p, errors, topic, partition, key, value, headers, cb):
    kw = {"key": key, "value": value, "headers": headers, "on_delivery": cb}
    if partition >= 0:
        kw["partition"] = partition
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        try:
            p.produce(topic, **kw)
            return
        except BufferError:
            if time.monotonic() > deadline:
                raise Failure("producing: the local queue stayed full for %ds" % TIMEOUT_S)
            p.poll(0.1)
            errors.check()


def flush(p, errors):
    left = p.flush(TIMEOUT_S)
    errors.check()
    if left:
        raise Failure("producing: %d records undelivered after %ds" % (left, TIMEOUT_S))


def produce_txn(a):
    errors = Errors()
    conf = producer_conf(a, errors)
    conf.update({
        "transactional.id": a.transactional_id,
        "enable.idempotence": True,
        "transaction.timeout.ms": 60000,
    })
    p = Producer(conf)
    p.init_transactions(TIMEOUT_S)
    errors.check()
    committed = aborted = committed_txns = aborted_txns = 0
    for i in range(a.transactions):
        p.begin_transaction()
        d = Deliveries()
        for j in range(a.records_per_txn):
            send(p, errors, a.topic, a.partition,
                 ("txn-%d-key-%d" % (i, j)).encode(), padded("txn-%d-value-%d" % (i, j), a.value_size),
                 [("kmirror-txn", str(i).encode())], d)
        if a.abort_every > 0 and (i + 1) % a.abort_every == 0:
            # Flush first, so that the aborted records are in the log
            # (abort_transaction purges what is still queued).
            flush(p, errors)
            d.check()
            p.abort_transaction(TIMEOUT_S)
            aborted += a.records_per_txn
            aborted_txns += 1
        else:
            p.commit_transaction(TIMEOUT_S)
            d.check()
            committed += a.records_per_txn
            committed_txns += 1
        errors.check()
    return {"committed_records": committed, "aborted_records": aborted,
            "committed_txns": committed_txns, "aborted_txns": aborted_txns}


def produce(a):
    errors = Errors()
    conf = producer_conf(a, errors)
    conf["enable.idempotence"] = bool(a.idempotent)
    p = Producer(conf)
    d = Deliveries()
    for i in range(a.records):
        send(p, errors, a.topic, a.partition, ("key-%d" % i).encode(), padded("value-%d" % i, a.value_size),
             [("kmirror-record", str(i).encode())], d)
        p.poll(0)
    flush(p, errors)
    d.check()
    return {"produced": a.records}


# Group coordinator errors a fresh broker answers while it creates or loads
# __consumer_offsets: retried, as the Java client does, for up to 30 s.
COORDINATOR_PENDING = (KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE,
                       KafkaError.NOT_COORDINATOR)


def commit_offsets(c, offsets):
    """Commits offsets synchronously, retrying while the coordinator is
    pending; returns the per-partition results."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return c.commit(offsets=offsets, asynchronous=False)
        except KafkaException as e:
            err = e.args[0]
            if err.code() not in COORDINATOR_PENDING or time.monotonic() > deadline:
                raise
            time.sleep(0.25)


def consumer_conf(a, errors):
    conf = base(a)
    conf.update({
        "group.id": a.group,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        # librdkafka's spelling of auto.offset.reset=none.
        "auto.offset.reset": "error",
        "error_cb": errors,
    })
    return conf


def text(b):
    return None if b is None else b.decode("utf-8", "replace")


def consume_group(a):
    if a.max_records < 0:
        raise Failure("--max-records must not be negative")
    errors = Errors()
    conf = consumer_conf(a, errors)
    conf["isolation.level"] = a.isolation
    c = Consumer(conf)
    parts = {}
    total = 0
    try:
        # The timeout counts from the group's assignment: joining is bounded
        # on its own (JOIN_TIMEOUT_S), so that a slow join is an error that
        # says so, never an empty read.
        deadline = []

        def on_assign(consumer, partitions):
            if not deadline:
                deadline.append(time.monotonic() + a.timeout_ms / 1000.0)

        c.subscribe([a.topic], on_assign=on_assign)
        join_deadline = time.monotonic() + JOIN_TIMEOUT_S
        while total < a.max_records:
            now = time.monotonic()
            if not deadline and now > join_deadline:
                raise Failure("group %s was not assigned the partitions of %s within %d ms of joining"
                              % (a.group, a.topic, JOIN_TIMEOUT_S * 1000))
            left = deadline[0] - now if deadline else 0.2
            if left <= 0:
                break
            msg = c.poll(min(left, 0.2))
            errors.check()
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._AUTO_OFFSET_RESET:
                    raise Failure("group %s has no committed offset for partition(s) [%s-%d] "
                                  "(auto.offset.reset=none): %s" % (a.group, msg.topic(), msg.partition(), err))
                if err.fatal() or (not err.retriable() and err.code() not in (
                        KafkaError._PARTITION_EOF, KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._TRANSPORT,
                        KafkaError._ALL_BROKERS_DOWN)):
                    raise Failure("consuming: %s" % err)
                print("kmirror-rdkafka: consumer error: %s" % err, file=sys.stderr)
                continue
            pt = parts.get(msg.partition())
            if pt is None:
                pt = parts[msg.partition()] = {
                    "partition": msg.partition(), "first_offset": msg.offset(),
                    "first_key": text(msg.key()), "first_value": text(msg.value()), "records": 0,
                }
            pt["last"] = msg.offset()
            pt["records"] += 1
            total += 1
        out = {"records": total, "partitions": []}
        if a.commit:
            offsets = [TopicPartition(a.topic, p, pt["last"] + 1) for p, pt in sorted(parts.items())]
            if offsets:
                for tp in commit_offsets(c, offsets):
                    if tp.error is not None:
                        raise Failure("committing %s-%d: %s" % (tp.topic, tp.partition, tp.error))
            out["offsets"] = {str(tp.partition): tp.offset for tp in offsets}
        for _, pt in sorted(parts.items()):
            del pt["last"]
            out["partitions"].append(pt)
        return out
    finally:
        c.close()


def commit(a):
    offsets = {}
    for po in a.offsets.split(","):
        try:
            p, o = po.split("=", 1)
            p, o = int(p), int(o)
        except ValueError:
            raise Failure("--offsets: %r is not partition=offset" % po)
        if p in offsets:
            raise Failure("--offsets: partition %d given twice" % p)
        offsets[p] = o
    errors = Errors()
    c = Consumer(consumer_conf(a, errors))
    try:
        res = commit_offsets(c, [TopicPartition(a.topic, p, o) for p, o in sorted(offsets.items())])
        errors.check()
        for tp in res:
            if tp.error is not None:
                raise Failure("committing %s-%d: %s" % (tp.topic, tp.partition, tp.error))
    finally:
        c.close()
    return {"offsets": {str(p): o for p, o in sorted(offsets.items())}}


class Parser(argparse.ArgumentParser):
    def error(self, message):
        self.print_usage(sys.stderr)
        print("kmirror-rdkafka: usage: %s" % message, file=sys.stderr)
        sys.exit(2)


def parser():
    ap = Parser(prog="kmirror_client.py", allow_abbrev=False)
    sub = ap.add_subparsers(dest="cmd", required=True, parser_class=Parser)

    def cmd(name, fn):
        s = sub.add_parser(name, allow_abbrev=False)
        s.set_defaults(fn=fn)
        s.add_argument("--bootstrap", required=True)
        s.add_argument("--sasl-user")
        s.add_argument("--sasl-password")
        return s

    s = cmd("produce-txn", produce_txn)
    s.add_argument("--topic", required=True)
    s.add_argument("--transactional-id", required=True)
    s.add_argument("--transactions", type=int, required=True)
    s.add_argument("--records-per-txn", type=int, required=True)
    s.add_argument("--abort-every", type=int, default=0)
    s.add_argument("--partition", type=int, default=-1)
    s.add_argument("--compression", default="none")
    s.add_argument("--value-size", type=int, default=0)

    s = cmd("produce", produce)
    s.add_argument("--topic", required=True)
    s.add_argument("--records", type=int, required=True)
    s.add_argument("--idempotent", action="store_true")
    s.add_argument("--partition", type=int, default=-1)
    s.add_argument("--compression", default="none")
    s.add_argument("--value-size", type=int, default=0)

    s = cmd("consume-group", consume_group)
    s.add_argument("--topic", required=True)
    s.add_argument("--group", required=True)
    s.add_argument("--max-records", type=int, required=True)
    s.add_argument("--isolation", choices=["read_committed", "read_uncommitted"], default="read_committed")
    s.add_argument("--timeout-ms", type=int, default=15000)
    s.add_argument("--commit", action="store_true")

    s = cmd("commit", commit)
    s.add_argument("--group", required=True)
    s.add_argument("--topic", required=True)
    s.add_argument("--offsets", required=True)
    return ap


def main():
    a = parser().parse_args()
    try:
        out = a.fn(a)
    except Failure as e:
        print("kmirror-rdkafka: %s" % e, file=sys.stderr)
        return 1
    except KafkaException as e:
        print("kmirror-rdkafka: %s: %s" % (a.cmd, e), file=sys.stderr)
        return 1
    sys.stdout.write(json.dumps(out, separators=(",", ":")) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
