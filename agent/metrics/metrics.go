// Package metrics exposes the agent's Prometheus metrics: on every scrape a
// Collector reads the coordinator's describe figures (the same ones GET
// /v1/mirrors shows) and the fetchers' process-wide counters, so there is no
// second bookkeeping to drift from describe.
//
// KIP-1279's mirror metrics, adapted to Prometheus naming:
//
//	MaxLag                      kmirror_mirror_max_lag_records{mirror}
//	ConsumerLag (per partition) kmirror_partition_lag_records{mirror,topic,partition}
//	                            kmirror_partition_lag_seconds{mirror,topic,partition}
//	                            (both absent while the source's end is unknown)
//	(staleness of lag)          kmirror_partition_source_offset_age_seconds{mirror,topic,partition}
//	FailedPartitionsCount       kmirror_failed_partitions{mirror}
//	<State>PartitionState       kmirror_partitions{mirror,state}
//	(why, by reason code)       kmirror_partition_reason{mirror,topic,partition,reason_code}:
//	                            1 for each partition whose reason has a code
//	                            (describe's reason_code; FAILED or not)
//	BytesPerSec                 rate(kmirror_mirrored_bytes_total[…]) (per partition; sum by mirror)
//	(records per second)        rate(kmirror_mirrored_records_total[…])
//	RequestsPerSec (fetcher)    rate(kmirror_mirror_fetch_requests_total[…]) per mirror,
//	                            rate(kmirror_fetch_requests_total[…]) whole agent
//	MinFetchRate                min by (mirror) (rate(kmirror_mirror_fetch_requests_total[…]))
//	(fetched bytes per second)  rate(kmirror_mirror_fetched_bytes_total[…])
//	(write requests per second) rate(kmirror_write_requests_total[…]) by kind, whole
//	                            agent; kmirror_write_request_items_total over it is
//	                            batches or markers per request
//	(coordinator transactions)  rate(kmirror_destination_transactions_total[…]) whole agent
//	(how far the destination)   kmirror_destination_round_trip_seconds{broker} and
//	                            kmirror_destination_connections{broker}, by address
//	DeadThreadCount             kmirror_mirror_dead_fetchers{mirror}: source broker fetch
//	                            loops whose last fetch failed (they retry with backoff
//	                            rather than die)
//	byte-rate (MirrorReplication) kmirror_mirror_throttle_rate_bytes_per_second{mirror}
//	                            (the throttle's ceiling, 0 without one) and
//	                            kmirror_mirror_throttled_seconds_total{mirror}
//	TopicConfigMetadataSyncError, ConsumerGroupOffsetSyncError, AclSyncError
//	                            kmirror_sync_errors_total{mirror,kind} (kind: each
//	                            of mirrorapi.SyncKinds, such as configs, groups,
//	                            acls; partitions for partition growth)
//	(time of the last sync)     kmirror_sync_last_success_timestamp_seconds{mirror,kind}
//	(items in sync)             kmirror_sync_items{mirror,kind}
//
// Counters come from cumulative describe figures: they restart from zero
// when a partition's mirror restarts (agent restart, topic re-added), which
// rate() and increase() treat as a counter reset. The per-mirror fetch
// counters restart with the agent.
//
// Not exposed because the agent does not track them yet: fetch figures per
// source broker. kmirror_fetch_throttle_seconds_total is
// the source brokers' own quota throttling (such as a source_quota of a
// throttle), agent-wide.
package metrics

import (
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/writer"
	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// Source is what the collector reads: the coordinator.
type Source interface {
	Describe() []mirrorapi.Mirror
}

// States lists the partition states kmirror_partitions always reports, zero
// included, so that a state's series exists before a partition enters it.
var States = []mirrorapi.State{
	mirrorapi.StateInitializing, mirrorapi.StatePreparing, mirrorapi.StateMirroring,
	mirrorapi.StatePaused, mirrorapi.StateStopping, mirrorapi.StateStopped, mirrorapi.StateFailed,
}

var (
	partLabels = []string{"mirror", "topic", "partition"}

	descLag = prometheus.NewDesc("kmirror_partition_lag_records",
		"Records on the source not yet mirrored (source high watermark minus destination log end).", partLabels, nil)
	descLagSeconds = prometheus.NewDesc("kmirror_partition_lag_seconds",
		"Approximate age of the oldest unmirrored record: the time since the partition last had no lag; 0 without lag.", partLabels, nil)
	descSourceAge = prometheus.NewDesc("kmirror_partition_source_offset_age_seconds",
		"Age of the source figures the partition's lag is computed from (+Inf when not read since the agent started): alert when it grows, as lag is then out of date.", partLabels, nil)
	descBytes = prometheus.NewDesc("kmirror_mirrored_bytes_total",
		"Record batch bytes written to the destination since the partition's mirror started.", partLabels, nil)
	descRecords = prometheus.NewDesc("kmirror_mirrored_records_total",
		"Records written to the destination since the partition's mirror started.", partLabels, nil)
	descLost = prometheus.NewDesc("kmirror_lost_records_total",
		"Source records that retention removed before they were mirrored.", partLabels, nil)
	descRetries = prometheus.NewDesc("kmirror_partition_retries_total",
		"Times the partition's mirror restarted from the destination log end after an error.", partLabels, nil)
	descReason = prometheus.NewDesc("kmirror_partition_reason",
		"1 for a partition whose reason has a stable code (describe's reason_code: why it failed, or what it waits for); absent without one.",
		append(slices.Clone(partLabels), "reason_code"), nil)

	descMaxLag = prometheus.NewDesc("kmirror_mirror_max_lag_records",
		"Largest partition lag of the mirror, in records (KIP-1279 MaxLag).", []string{"mirror"}, nil)
	descFailed = prometheus.NewDesc("kmirror_failed_partitions",
		"Partitions of the mirror in state FAILED (KIP-1279 FailedPartitionsCount).", []string{"mirror"}, nil)
	descStates = prometheus.NewDesc("kmirror_partitions",
		"Partitions of the mirror per state.", []string{"mirror", "state"}, nil)
	descBuffered = prometheus.NewDesc("kmirror_mirror_buffered_bytes",
		"Bytes the mirror's fetchers hold, fetched but not yet written.", []string{"mirror"}, nil)
	descMirrorError = prometheus.NewDesc("kmirror_mirror_error",
		"1 while the mirror does not run because of an error (describe shows it), else 0.", []string{"mirror"}, nil)
	descTopicError = prometheus.NewDesc("kmirror_topic_error",
		"1 while the topic is not mirrored because of an error (creation, config sync, preflight), else 0.", []string{"mirror", "topic"}, nil)

	descMirrorFetchRequests = prometheus.NewDesc("kmirror_mirror_fetch_requests_total",
		"Fetch requests the mirror's fetch loops sent to source brokers (KIP-1279 RequestsPerSec).", []string{"mirror"}, nil)
	descMirrorFetchErrors = prometheus.NewDesc("kmirror_mirror_fetch_errors_total",
		"Fetch requests of the mirror that failed (transport or request-level error).", []string{"mirror"}, nil)
	descMirrorFetchedBytes = prometheus.NewDesc("kmirror_mirror_fetched_bytes_total",
		"Record batch bytes the mirror fetched from the source (KIP-1279 BytesPerSec, before writing).", []string{"mirror"}, nil)
	descDeadFetchers = prometheus.NewDesc("kmirror_mirror_dead_fetchers",
		"Source broker fetch loops of the mirror whose last fetch failed; they retry with backoff (KIP-1279 DeadThreadCount).", []string{"mirror"}, nil)
	descThrottleRate = prometheus.NewDesc("kmirror_mirror_throttle_rate_bytes_per_second",
		"Ceiling of the mirror's replication throttle in bytes per second, 0 without one (KIP-1279 mirror.replication.throttled.rate).", []string{"mirror"}, nil)
	descThrottled = prometheus.NewDesc("kmirror_mirror_throttled_seconds_total",
		"Time the mirror's throttle held its throttled partitions back.", []string{"mirror"}, nil)
	descSyncErrors = prometheus.NewDesc("kmirror_sync_errors_total",
		"Failed metadata syncs of the mirror per kind ("+syncKinds()+") since the agent started (KIP-1279 *SyncError).", []string{"mirror", "kind"}, nil)
	descSyncSuccess = prometheus.NewDesc("kmirror_sync_last_success_timestamp_seconds",
		"Unix time of the last metadata sync of the kind that completed without error; absent before the first.", []string{"mirror", "kind"}, nil)
	descSyncItems = prometheus.NewDesc("kmirror_sync_items",
		"Items the last successful metadata sync of the kind found in sync: topics (configs), partitions, consumer groups, ACLs.", []string{"mirror", "kind"}, nil)

	descFetchRequests = prometheus.NewDesc("kmirror_fetch_requests_total",
		"Fetch requests the agent's fetch loops sent to source brokers, all mirrors.", nil, nil)
	descFetchErrors = prometheus.NewDesc("kmirror_fetch_errors_total",
		"Fetch requests that failed (transport or request-level error), all mirrors.", nil, nil)
	descFetchThrottle = prometheus.NewDesc("kmirror_fetch_throttle_seconds_total",
		"Throttle time source brokers reported in fetch responses (client quotas), all mirrors.", nil, nil)
	descWriteRequests = prometheus.NewDesc("kmirror_write_requests_total",
		"Requests the agent sent to destination brokers to write, all mirrors, by kind: produce (plain batches of many partitions), markers (WriteTxnMarkers: filler markers), produce_txn (a batch of aborted source records, alone).", []string{"kind"}, nil)
	descTransactions = prometheus.NewDesc("kmirror_destination_transactions_total",
		"Transactions the agent ended through the destination's transaction coordinator, all mirrors: one per group of aborted source records (the aborted transactions of a fetch, with markers fillers), and one per coordinator filler. Each costs the coordinator two log appends and a marker per partition.", nil, nil)
	descRoundTrip = prometheus.NewDesc("kmirror_destination_round_trip_seconds",
		"Round trip to each destination broker the agent writes to, by address: the shortest of three ApiVersions requests on the first connection to it. From 10 ms the broker is far, and the agent writes to it over two connections with 32 batches of a partition in flight instead of one with 16.", []string{"broker"}, nil)
	descConnections = prometheus.NewDesc("kmirror_destination_connections",
		"Connections the agent writes to each destination broker over at most, by address: 1, or 2 to a far one (see kmirror_destination_round_trip_seconds).", []string{"broker"}, nil)
	descWriteItems = prometheus.NewDesc("kmirror_write_request_items_total",
		"What those requests carried, by kind: batches (produce) or markers (markers); divided by kmirror_write_requests_total, how well writes coalesce (produce_txn requests carry one batch each).", []string{"kind"}, nil)
)

// Collector is a prometheus.Collector over a Source. Until SetSource is
// called it reports the fetch counters only.
type Collector struct {
	src atomic.Pointer[Source]
}

// NewCollector returns a collector without a source yet.
func NewCollector() *Collector { return &Collector{} }

// SetSource makes the collector read s on every scrape.
func (c *Collector) SetSource(s Source) { c.src.Store(&s) }

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		descLag, descLagSeconds, descSourceAge, descBytes, descRecords, descLost, descRetries, descReason,
		descMaxLag, descFailed, descStates, descBuffered, descMirrorError, descTopicError,
		descSyncErrors, descSyncSuccess, descSyncItems,
		descFetchRequests, descFetchErrors, descFetchThrottle, descWriteRequests, descWriteItems, descTransactions, descRoundTrip, descConnections,
		descMirrorFetchRequests, descMirrorFetchErrors, descMirrorFetchedBytes, descDeadFetchers, descThrottleRate, descThrottled,
	} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	fs := fetcher.ReadStats()
	ch <- prometheus.MustNewConstMetric(descFetchRequests, prometheus.CounterValue, float64(fs.Requests))
	ch <- prometheus.MustNewConstMetric(descFetchErrors, prometheus.CounterValue, float64(fs.Errors))
	ch <- prometheus.MustNewConstMetric(descFetchThrottle, prometheus.CounterValue, float64(fs.ThrottleMillis)/1000)
	ws := writer.ReadStats()
	for _, w := range []struct {
		kind            string
		requests, items int64
	}{{"produce", ws.Produce, ws.ProduceBatches}, {"markers", ws.Markers, ws.MarkersWritten}} {
		ch <- prometheus.MustNewConstMetric(descWriteRequests, prometheus.CounterValue, float64(w.requests), w.kind)
		ch <- prometheus.MustNewConstMetric(descWriteItems, prometheus.CounterValue, float64(w.items), w.kind)
	}
	// One batch each: no items series, which would repeat the requests.
	ch <- prometheus.MustNewConstMetric(descWriteRequests, prometheus.CounterValue, float64(ws.ProduceTxn), "produce_txn")
	ch <- prometheus.MustNewConstMetric(descTransactions, prometheus.CounterValue, float64(ws.Transactions))
	for _, r := range writer.ReadReaches() {
		ch <- prometheus.MustNewConstMetric(descRoundTrip, prometheus.GaugeValue, r.RTT.Seconds(), r.Addr)
		ch <- prometheus.MustNewConstMetric(descConnections, prometheus.GaugeValue, float64(r.Lanes), r.Addr)
	}

	src := c.src.Load()
	if src == nil {
		return
	}
	now := time.Now()
	for _, m := range (*src).Describe() {
		gauge := func(d *prometheus.Desc, v float64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{m.Name}, labels...)...)
		}
		gauge(descMaxLag, float64(m.MaxLag))
		gauge(descFailed, float64(m.StateCounts[mirrorapi.StateFailed]))
		for _, s := range States {
			gauge(descStates, float64(m.StateCounts[s]), string(s))
		}
		for s, n := range m.StateCounts {
			if !slices.Contains(States, s) { // a state added later still shows
				gauge(descStates, float64(n), string(s))
			}
		}
		gauge(descBuffered, float64(m.BufferedBytes))
		counter := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, m.Name)
		}
		counter(descMirrorFetchRequests, float64(m.Fetch.Requests))
		counter(descMirrorFetchErrors, float64(m.Fetch.Errors))
		counter(descMirrorFetchedBytes, float64(m.Fetch.Bytes))
		gauge(descDeadFetchers, float64(m.Fetch.DeadFetchers))
		var rate float64
		if m.Throttle != nil {
			rate = float64(m.Throttle.RateBytesPerSecond)
		}
		gauge(descThrottleRate, rate)
		counter(descThrottled, float64(m.Fetch.ThrottledMillis)/1000)
		gauge(descMirrorError, b2f(m.Error != ""))
		for k, s := range m.Sync.All() {
			kind := k.String()
			ch <- prometheus.MustNewConstMetric(descSyncErrors, prometheus.CounterValue, float64(s.Errors), m.Name, kind)
			gauge(descSyncItems, float64(s.Items), kind)
			if t, err := time.Parse(time.RFC3339, s.LastSuccess); err == nil {
				gauge(descSyncSuccess, float64(t.Unix()), kind)
			}
		}
		for _, t := range m.Topics {
			gauge(descTopicError, b2f(t.Error != ""), t.Name)
			for _, p := range t.Partitions {
				l := []string{m.Name, t.Name, strconv.Itoa(int(p.Partition))}
				// An unknown lag is absent, never 0: the age series
				// (+Inf until the source's end is read) is what to
				// alert on.
				if p.Lag != mirrorapi.LagUnknown {
					ch <- prometheus.MustNewConstMetric(descLag, prometheus.GaugeValue, float64(p.Lag), l...)
					ch <- prometheus.MustNewConstMetric(descLagSeconds, prometheus.GaugeValue, float64(p.LagMillis)/1000, l...)
				}
				age := math.Inf(1)
				if !p.SourceOffsetAt.IsZero() {
					age = now.Sub(p.SourceOffsetAt).Seconds()
				}
				ch <- prometheus.MustNewConstMetric(descSourceAge, prometheus.GaugeValue, age, l...)
				ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(p.Bytes), l...)
				ch <- prometheus.MustNewConstMetric(descRecords, prometheus.CounterValue, float64(p.Records), l...)
				ch <- prometheus.MustNewConstMetric(descLost, prometheus.CounterValue, float64(p.LostRecords), l...)
				ch <- prometheus.MustNewConstMetric(descRetries, prometheus.CounterValue, float64(p.Retries), l...)
				if p.ReasonCode != "" {
					ch <- prometheus.MustNewConstMetric(descReason, prometheus.GaugeValue, 1, append(l, string(p.ReasonCode))...)
				}
			}
		}
	}
}

// syncKinds lists the kinds of metadata sync for a help text.
func syncKinds() string {
	var names []string
	for _, k := range mirrorapi.SyncKinds() {
		names = append(names, k.String())
	}
	return strings.Join(names, ", ")
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Registry returns a registry with c and the Go runtime and process
// collectors (go_*, process_*).
func Registry(c *Collector) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(c, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Handler serves reg in the Prometheus exposition formats. A collection
// error does not fail the scrape: what could be gathered is served and
// promhttp_metric_handler_errors_total counts the error.
func Handler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, ErrorHandling: promhttp.ContinueOnError})
}
