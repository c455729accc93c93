// The Java client (kafka-clients) driven by package javaclient: one
// subcommand per run, one JSON object on stdout, errors on stderr with a
// non-zero exit. The operations and their JSON are described in package
// clientop (internal/clientop), and must stay the same as the librdkafka
// script's (internal/rdkafka/kmirror_client.py).
//
//   produce-txn   --bootstrap B --topic T --transactional-id ID --transactions N
//                 --records-per-txn M --abort-every K [--partition P] [--compression C] [--value-size S]
//   produce       --bootstrap B --topic T --records N [--idempotent] [--partition P] [--compression C]
//                 [--value-size S]
//   consume-group --bootstrap B --topic T --group G --max-records N
//                 [--isolation read_committed|read_uncommitted] [--timeout-ms MS] [--commit]
//   commit        --bootstrap B --group G --topic T --offsets p=o,p=o
// and on each: [--sasl-user U --sasl-password P] (SASL PLAIN over SASL_PLAINTEXT).

import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.Collection;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.NoOffsetForPartitionException;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class KmirrorClient {
  /** Thrown for a bad command line: exit 2. */
  static final class Usage extends RuntimeException {
    Usage(String msg) { super(msg); }
  }

  /** Thrown for a failure explained in its message: exit 1 without a stack trace. */
  static final class Failure extends RuntimeException {
    Failure(String msg) { super(msg); }
  }

  public static void main(String[] args) {
    // Only the result goes to stdout: anything the client's logging
    // prints there (log4j2's default console appender) goes to stderr.
    PrintStream out = System.out;
    System.setOut(System.err);
    int code = 0;
    try {
      if (args.length == 0) throw new Usage("missing subcommand");
      Flags f = new Flags(args);
      String json;
      switch (args[0]) {
        case "produce-txn": json = produceTxn(f); break;
        case "produce": json = produce(f); break;
        case "consume-group": json = consumeGroup(f); break;
        case "commit": json = commit(f); break;
        default: throw new Usage("unknown subcommand " + args[0]);
      }
      out.println(json);
      out.flush();
    } catch (Usage e) {
      System.err.println("kmirror-javaclient: usage: " + e.getMessage());
      code = 2;
    } catch (Failure e) {
      System.err.println("kmirror-javaclient: " + e.getMessage());
      code = 1;
    } catch (Throwable e) {
      e.printStackTrace(System.err);
      System.err.println("kmirror-javaclient: " + e);
      code = 1;
    }
    System.err.flush();
    System.exit(code);
  }

  /** "--name value" and "--name=value" flags; idempotent and commit take no value. */
  static final class Flags {
    private static final Set<String> BOOLEANS = Set.of("idempotent", "commit");
    private final Map<String, String> values = new HashMap<>();
    private final Set<String> used = new HashSet<>();

    Flags(String[] args) {
      for (int i = 1; i < args.length; i++) {
        String a = args[i];
        if (!a.startsWith("--")) throw new Usage("unexpected argument " + a);
        String name = a.substring(2), value;
        int eq = name.indexOf('=');
        if (eq >= 0) {
          value = name.substring(eq + 1);
          name = name.substring(0, eq);
        } else if (BOOLEANS.contains(name)) {
          value = "true";
        } else {
          if (i + 1 >= args.length) throw new Usage("flag --" + name + " needs a value");
          value = args[++i];
        }
        if (values.put(name, value) != null) throw new Usage("flag --" + name + " given twice");
      }
    }

    String opt(String name, String def) {
      used.add(name);
      return values.getOrDefault(name, def);
    }

    String req(String name) {
      String v = opt(name, null);
      if (v == null || v.isEmpty()) throw new Usage("flag --" + name + " is required");
      return v;
    }

    int integer(String name, Integer def) {
      String v = def == null ? req(name) : opt(name, null);
      if (v == null) return def;
      try {
        return Integer.parseInt(v);
      } catch (NumberFormatException e) {
        throw new Usage("flag --" + name + ": " + v + " is not an integer");
      }
    }

    boolean bool(String name) {
      return Boolean.parseBoolean(opt(name, "false"));
    }

    /** Fails on a flag the subcommand did not read. */
    void done() {
      for (String n : values.keySet()) {
        if (!used.contains(n)) throw new Usage("unknown flag --" + n);
      }
    }
  }

  static Properties base(Flags f) {
    Properties p = new Properties();
    p.put("bootstrap.servers", f.req("bootstrap"));
    p.put("client.id", "kmirror-javaclient");
    String user = f.opt("sasl-user", null), pass = f.opt("sasl-password", "");
    if (user != null && !user.isEmpty()) {
      p.put("security.protocol", "SASL_PLAINTEXT");
      p.put("sasl.mechanism", "PLAIN");
      p.put("sasl.jaas.config", "org.apache.kafka.common.security.plain.PlainLoginModule required username=\""
          + jaasEscape(user) + "\" password=\"" + jaasEscape(pass) + "\";");
    }
    return p;
  }

  static String jaasEscape(String s) {
    return s.replace("\\", "\\\\").replace("\"", "\\\"");
  }

  static Properties producerProps(Flags f) {
    Properties p = base(f);
    p.put("key.serializer", ByteArraySerializer.class.getName());
    p.put("value.serializer", ByteArraySerializer.class.getName());
    p.put("acks", "all");
    p.put("linger.ms", "5");
    p.put("compression.type", f.opt("compression", "none"));
    p.put("max.block.ms", "30000");
    p.put("delivery.timeout.ms", "30000");
    p.put("request.timeout.ms", "10000");
    return p;
  }

  static byte[] bytes(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  static Integer partition(Flags f) {
    int p = f.integer("partition", -1);
    return p < 0 ? null : p;
  }

  static final String PAD_ALPHABET = "0123456789abcdef";

  /** clientop.Padded: v padded to size bytes with noise seeded by v's FNV-1a hash. */
  static byte[] padded(String v, int size) {
    byte[] b = bytes(v);
    if (b.length >= size) return b;
    long x = 0xcbf29ce484222325L;
    for (byte c : b) {
      x ^= c & 0xff;
      x *= 0x100000001b3L;
    }
    byte[] out = java.util.Arrays.copyOf(b, size);
    for (int i = b.length; i < size; i++) {
      x = x * 6364136223846793005L + 1442695040888963407L;
      out[i] = (byte) PAD_ALPHABET.charAt((int) (x >>> 60));
    }
    return out;
  }

  static String produceTxn(Flags f) throws Exception {
    Properties p = producerProps(f);
    String topic = f.req("topic");
    p.put("transactional.id", f.req("transactional-id"));
    p.put("enable.idempotence", "true");
    p.put("transaction.timeout.ms", "60000");
    int n = f.integer("transactions", null), m = f.integer("records-per-txn", null);
    int abortEvery = f.integer("abort-every", 0);
    Integer partition = partition(f);
    int valueSize = f.integer("value-size", 0);
    f.done();
    int committed = 0, aborted = 0, committedTxns = 0, abortedTxns = 0;
    try (KafkaProducer<byte[], byte[]> pr = new KafkaProducer<>(p)) {
      pr.initTransactions();
      for (int i = 0; i < n; i++) {
        pr.beginTransaction();
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        for (int j = 0; j < m; j++) {
          ProducerRecord<byte[], byte[]> r = new ProducerRecord<>(topic, partition,
              bytes("txn-" + i + "-key-" + j), padded("txn-" + i + "-value-" + j, valueSize));
          r.headers().add("kmirror-txn", bytes(Integer.toString(i)));
          sent.add(pr.send(r));
        }
        if (abortEvery > 0 && (i + 1) % abortEvery == 0) {
          // Flush first, so that the aborted records are in the log.
          pr.flush();
          check(sent);
          pr.abortTransaction();
          aborted += m;
          abortedTxns++;
        } else {
          pr.commitTransaction();
          check(sent);
          committed += m;
          committedTxns++;
        }
      }
    }
    return "{\"committed_records\":" + committed + ",\"aborted_records\":" + aborted
        + ",\"committed_txns\":" + committedTxns + ",\"aborted_txns\":" + abortedTxns + "}";
  }

  static void check(List<Future<RecordMetadata>> sent) throws Exception {
    for (Future<RecordMetadata> s : sent) {
      try {
        s.get();
      } catch (ExecutionException e) {
        throw new Failure("producing: " + e.getCause());
      }
    }
  }

  static String produce(Flags f) throws Exception {
    Properties p = producerProps(f);
    String topic = f.req("topic");
    int n = f.integer("records", null);
    // The Java client is idempotent by default (3.0 on): say it either way.
    p.put("enable.idempotence", Boolean.toString(f.bool("idempotent")));
    Integer partition = partition(f);
    int valueSize = f.integer("value-size", 0);
    f.done();
    List<Future<RecordMetadata>> sent = new ArrayList<>();
    try (KafkaProducer<byte[], byte[]> pr = new KafkaProducer<>(p)) {
      for (int i = 0; i < n; i++) {
        ProducerRecord<byte[], byte[]> r = new ProducerRecord<>(topic, partition,
            bytes("key-" + i), padded("value-" + i, valueSize));
        r.headers().add("kmirror-record", bytes(Integer.toString(i)));
        sent.add(pr.send(r));
      }
      pr.flush();
      check(sent);
    }
    return "{\"produced\":" + n + "}";
  }

  static Properties consumerProps(Flags f, String group) {
    Properties p = base(f);
    p.put("group.id", group);
    p.put("key.deserializer", ByteArrayDeserializer.class.getName());
    p.put("value.deserializer", ByteArrayDeserializer.class.getName());
    p.put("enable.auto.commit", "false");
    p.put("auto.offset.reset", "none");
    p.put("default.api.timeout.ms", "30000");
    p.put("request.timeout.ms", "10000");
    return p;
  }

  static final class Part {
    long firstOffset, lastOffset;
    byte[] firstKey, firstValue;
    int records;
  }

  // JOIN_TIMEOUT_MS bounds consume-group's wait for its assignment.
  static final long JOIN_TIMEOUT_MS = 60_000;

  static String consumeGroup(Flags f) {
    String topic = f.req("topic"), group = f.req("group");
    Properties p = consumerProps(f, group);
    int max = f.integer("max-records", null);
    String iso = f.opt("isolation", "read_committed");
    if (!iso.equals("read_committed") && !iso.equals("read_uncommitted")) {
      throw new Usage("flag --isolation: " + iso + ", want read_committed or read_uncommitted");
    }
    p.put("isolation.level", iso);
    p.put("max.poll.records", Integer.toString(Math.max(1, Math.min(max, 500))));
    long timeoutMs = f.integer("timeout-ms", 15000);
    boolean commit = f.bool("commit");
    f.done();
    // The timeout counts from the group's assignment: joining (a JVM
    // starting on a loaded machine, a rebalance after the previous member
    // left) is bounded on its own, so that a slow join is an error that
    // says so, never an empty read.
    long joinDeadline = System.nanoTime() + JOIN_TIMEOUT_MS * 1_000_000L;
    long[] deadline = {0};
    Map<Integer, Part> parts = new TreeMap<>();
    int total = 0;
    StringBuilder offsets = new StringBuilder();
    try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
      c.subscribe(List.of(topic), new ConsumerRebalanceListener() {
        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> tps) {}

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> tps) {
          if (deadline[0] == 0) deadline[0] = System.nanoTime() + timeoutMs * 1_000_000L;
        }
      });
      while (total < max) {
        long now = System.nanoTime();
        if (deadline[0] == 0 && now > joinDeadline) {
          throw new Failure("group " + group + " was not assigned the partitions of " + topic + " within "
              + JOIN_TIMEOUT_MS + " ms of joining");
        }
        long left = deadline[0] == 0 ? 200 : (deadline[0] - now) / 1_000_000L;
        if (left <= 0) break;
        ConsumerRecords<byte[], byte[]> recs;
        try {
          recs = c.poll(Duration.ofMillis(Math.min(left, 200)));
        } catch (NoOffsetForPartitionException e) {
          throw new Failure("group " + group + " has no committed offset for partition(s) "
              + e.partitions() + " (auto.offset.reset=none)");
        }
        for (ConsumerRecord<byte[], byte[]> r : recs) {
          if (total >= max) break;
          Part pt = parts.get(r.partition());
          if (pt == null) {
            pt = new Part();
            pt.firstOffset = r.offset();
            pt.firstKey = r.key();
            pt.firstValue = r.value();
            parts.put(r.partition(), pt);
          }
          pt.lastOffset = r.offset();
          pt.records++;
          total++;
        }
      }
      if (commit && !parts.isEmpty()) {
        Map<TopicPartition, OffsetAndMetadata> m = new HashMap<>();
        for (Map.Entry<Integer, Part> e : parts.entrySet()) {
          long o = e.getValue().lastOffset + 1;
          m.put(new TopicPartition(topic, e.getKey()), new OffsetAndMetadata(o));
          offsets.append(offsets.length() == 0 ? "" : ",").append("\"").append(e.getKey()).append("\":").append(o);
        }
        c.commitSync(m);
      }
    }
    StringBuilder sb = new StringBuilder("{\"records\":").append(total).append(",\"partitions\":[");
    boolean first = true;
    for (Map.Entry<Integer, Part> e : parts.entrySet()) {
      Part pt = e.getValue();
      if (!first) sb.append(',');
      first = false;
      sb.append("{\"partition\":").append(e.getKey())
          .append(",\"first_offset\":").append(pt.firstOffset)
          .append(",\"first_key\":").append(jsonBytes(pt.firstKey))
          .append(",\"first_value\":").append(jsonBytes(pt.firstValue))
          .append(",\"records\":").append(pt.records).append('}');
    }
    sb.append(']');
    if (commit) sb.append(",\"offsets\":{").append(offsets).append('}');
    return sb.append('}').toString();
  }

  static String commit(Flags f) {
    String topic = f.req("topic"), group = f.req("group");
    Properties p = consumerProps(f, group);
    String spec = f.req("offsets");
    f.done();
    Map<TopicPartition, OffsetAndMetadata> m = new HashMap<>();
    Map<Integer, Long> sorted = new TreeMap<>();
    for (String po : spec.split(",")) {
      String[] kv = po.split("=", 2);
      try {
        if (kv.length != 2) throw new NumberFormatException();
        int part = Integer.parseInt(kv[0].trim());
        long off = Long.parseLong(kv[1].trim());
        if (sorted.put(part, off) != null) throw new Usage("flag --offsets: partition " + part + " given twice");
        m.put(new TopicPartition(topic, part), new OffsetAndMetadata(off));
      } catch (NumberFormatException e) {
        throw new Usage("flag --offsets: " + po + " is not partition=offset");
      }
    }
    try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
      c.commitSync(m);
    }
    StringBuilder sb = new StringBuilder("{\"offsets\":{");
    boolean first = true;
    for (Map.Entry<Integer, Long> e : sorted.entrySet()) {
      if (!first) sb.append(',');
      first = false;
      sb.append('"').append(e.getKey()).append("\":").append(e.getValue());
    }
    return sb.append("}}").toString();
  }

  static String jsonBytes(byte[] b) {
    if (b == null) return "null";
    String s = new String(b, StandardCharsets.UTF_8);
    StringBuilder sb = new StringBuilder("\"");
    for (int i = 0; i < s.length(); i++) {
      char ch = s.charAt(i);
      switch (ch) {
        case '"': sb.append("\\\""); break;
        case '\\': sb.append("\\\\"); break;
        default:
          if (ch < 0x20) sb.append(String.format("\\u%04x", (int) ch));
          else sb.append(ch);
      }
    }
    return sb.append('"').toString();
  }
}
