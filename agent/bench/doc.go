// Package bench holds the agent's performance benchmarks, run by `make bench`
// (each benchmark once: -benchtime 1x). Every figure is printed as a
// labelled line on stdout and reported with b.ReportMetric.
//
//   - BenchmarkThroughput: the agent (an in-process coordinator) against a
//     bare copy loop (copyloop_test.go) and a MirrorMaker-style
//     consume/re-encode/produce pipeline (reencode_test.go), each copying the
//     same source topic (2000 MB of 1 KiB values, 6 partitions, zstd) to a
//     fresh destination topic of the same two clusters; the first tenth of
//     every copy is excluded from its timing.
//   - BenchmarkAlloc: bytes the agent allocates per byte mirrored, and its
//     CPU per GB, with both clusters in processes of their own.
//   - BenchmarkLatency: produce-to-visible latency at a steady 10 MB/s.
//   - BenchmarkBacklogRSS: `kmirror agent` as a process of its own catching
//     up a 1 GiB backlog, its RSS sampled from /proc.
//   - BenchmarkPad: how fast a new mirror topic whose source log starts at
//     500,000,000 is aligned (padded, then cut with DeleteRecords), and the
//     bytes a pad offset takes on the destination before the cut.
//   - BenchmarkIdlePartition: the throughput comparison with one source
//     partition idle, the case that starved the busy ones before the
//     fetcher capped its long poll.
//   - BenchmarkSlowDestination: the comparison against a destination that
//     takes 5 ms to answer every Produce, as acks=all does on a real cluster.
//   - BenchmarkTransactional: a transactional source (4 producers, 100
//     records per transaction, 5% aborted) against a plain source of the
//     same records, mirrored side by side.
//   - BenchmarkFillers: a compacted source with 50% holes, mirrored with
//     each filler method (coordinator transactions, WriteTxnMarkers).
//   - BenchmarkMirrorMaker: `kmirror agent` against Apache Kafka's
//     MirrorMaker 2, each a process of its own, on real Kafka brokers and on
//     the embedded engine: loopback, a 50 ms round trip with the agent next
//     to either cluster (internal/netshape), a transactional source written
//     by the Java producer and its plain twin, a compacted source with 50%
//     holes; MB/s, CPU-seconds per GB and peak RSS of each, and the
//     destination brokers' CPU-seconds per GB, as ratios; the agent's
//     write requests per MB and what each carried (its /metrics); and the
//     batches each contender had the destination append per MB, read back
//     from the destination topic, with the destination brokers' CPU per
//     batch.
//   - BenchmarkAgents: 1, 2 and 3 `kmirror agent` processes with
//     coordination = "group", each GOMAXPROCS=1, copying six sources (one
//     mirror each, 2400 MB of 1 KiB values) between the same two Kafka
//     4.4.0 clusters in one run; MB/s and CPU per GB as ratios to one
//     agent (KMIRROR_BENCH_AGENTS_MB changes the payload).
//
// Except in BenchmarkMirrorMaker and BenchmarkAgents, the clusters are kfake
// (internal/devcluster) in lenient mode: the strict-validation layer costs
// about half of kfake's produce throughput and would measure the test
// harness, not the agent. They run on the same
// machine as the agent (2 cores where the figures were taken), and kfake
// handles all requests of a cluster on one goroutine, so throughput figures
// are bounded by kfake and are comparable only side by side, within one run.
//
// `make bench` sets GODEBUG=madvdontneed=0 (see memoryMode). Setting
// KMIRROR_BENCH_PROFILE to a directory writes a CPU profile of every
// measured copy there (an execution trace instead when KMIRROR_BENCH_TRACE
// is also set); KMIRROR_BENCH_MB, KMIRROR_BENCH_PEER_MB and
// KMIRROR_BENCH_PAD change the throughput payload (MB), the payload of
// BenchmarkMirrorMaker's plain source (MB) and the padding target (offsets
// per partition); KMIRROR_MM2_VERSION the MirrorMaker release;
// KMIRROR_BENCH_PEERS picks BenchmarkMirrorMaker's scenarios by name,
// KMIRROR_BENCH_PEER_RUNS how many times kmirror copies each (the median
// run counts), and
// KMIRROR_KAFKA_JVM_OPTS adds options to the Kafka brokers' JVMs (such as
// -XX:StartFlightRecording=settings=profile, dumped with jcmd PID JFR.dump).
package bench
