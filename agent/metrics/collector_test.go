package metrics_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kmirror/kmirror/agent/metrics"
	"github.com/kmirror/kmirror/internal/mirrorapi"
)

type fakeSource []mirrorapi.Mirror

func (f fakeSource) Describe() []mirrorapi.Mirror { return f }

// TestCollectorFigures: every describe figure lands in its series with the
// right labels, type and unit; metric names pass Prometheus' lint.
func TestCollectorFigures(t *testing.T) {
	c := metrics.NewCollector()
	c.SetSource(fakeSource{{
		Name: "dr", MaxLag: 7, BufferedBytes: 4096, Error: "",
		Throttle:    &mirrorapi.Throttle{RateBytesPerSecond: 1 << 20, Partitions: []string{"*"}},
		Fetch:       mirrorapi.FetchStats{Requests: 40, Errors: 3, Bytes: 123456, DeadFetchers: 1, ThrottledMillis: 2500},
		StateCounts: map[mirrorapi.State]int{mirrorapi.StateMirroring: 1, mirrorapi.StateFailed: 1, "SOMETHING_NEW": 2},
		Topics: []mirrorapi.Topic{
			{Name: "orders", Partitions: []mirrorapi.Partition{
				{Partition: 0, State: mirrorapi.StateMirroring, Lag: 7, LagMillis: 1500, Bytes: 1000, Records: 10, Retries: 2},
				{Partition: 1, State: mirrorapi.StateFailed, Lag: 0, Bytes: 50, Records: 1, LostRecords: 3},
			}},
			{Name: "gone", Error: "source topic deleted"},
		},
	}, {
		Name: "down", Error: "source unreachable", StateCounts: map[mirrorapi.State]int{},
	}})

	want := `
# HELP kmirror_failed_partitions Partitions of the mirror in state FAILED (KIP-1279 FailedPartitionsCount).
# TYPE kmirror_failed_partitions gauge
kmirror_failed_partitions{mirror="down"} 0
kmirror_failed_partitions{mirror="dr"} 1
# HELP kmirror_lost_records_total Source records that retention removed before they were mirrored.
# TYPE kmirror_lost_records_total counter
kmirror_lost_records_total{mirror="dr",partition="0",topic="orders"} 0
kmirror_lost_records_total{mirror="dr",partition="1",topic="orders"} 3
# HELP kmirror_mirror_error 1 while the mirror does not run because of an error (describe shows it), else 0.
# TYPE kmirror_mirror_error gauge
kmirror_mirror_error{mirror="down"} 1
kmirror_mirror_error{mirror="dr"} 0
# HELP kmirror_mirror_max_lag_records Largest partition lag of the mirror, in records (KIP-1279 MaxLag).
# TYPE kmirror_mirror_max_lag_records gauge
kmirror_mirror_max_lag_records{mirror="down"} 0
kmirror_mirror_max_lag_records{mirror="dr"} 7
# HELP kmirror_mirrored_bytes_total Record batch bytes written to the destination since the partition's mirror started.
# TYPE kmirror_mirrored_bytes_total counter
kmirror_mirrored_bytes_total{mirror="dr",partition="0",topic="orders"} 1000
kmirror_mirrored_bytes_total{mirror="dr",partition="1",topic="orders"} 50
# HELP kmirror_mirrored_records_total Records written to the destination since the partition's mirror started.
# TYPE kmirror_mirrored_records_total counter
kmirror_mirrored_records_total{mirror="dr",partition="0",topic="orders"} 10
kmirror_mirrored_records_total{mirror="dr",partition="1",topic="orders"} 1
# HELP kmirror_partition_lag_records Records on the source not yet mirrored (source high watermark minus destination log end).
# TYPE kmirror_partition_lag_records gauge
kmirror_partition_lag_records{mirror="dr",partition="0",topic="orders"} 7
kmirror_partition_lag_records{mirror="dr",partition="1",topic="orders"} 0
# HELP kmirror_partition_lag_seconds Approximate age of the oldest unmirrored record: the time since the partition last had no lag; 0 without lag.
# TYPE kmirror_partition_lag_seconds gauge
kmirror_partition_lag_seconds{mirror="dr",partition="0",topic="orders"} 1.5
kmirror_partition_lag_seconds{mirror="dr",partition="1",topic="orders"} 0
# HELP kmirror_partition_retries_total Times the partition's mirror restarted from the destination log end after an error.
# TYPE kmirror_partition_retries_total counter
kmirror_partition_retries_total{mirror="dr",partition="0",topic="orders"} 2
kmirror_partition_retries_total{mirror="dr",partition="1",topic="orders"} 0
# HELP kmirror_partitions Partitions of the mirror per state.
# TYPE kmirror_partitions gauge
kmirror_partitions{mirror="down",state="FAILED"} 0
kmirror_partitions{mirror="down",state="INITIALIZING"} 0
kmirror_partitions{mirror="down",state="MIRRORING"} 0
kmirror_partitions{mirror="down",state="PAUSED"} 0
kmirror_partitions{mirror="down",state="PREPARING"} 0
kmirror_partitions{mirror="down",state="STOPPED"} 0
kmirror_partitions{mirror="down",state="STOPPING"} 0
kmirror_partitions{mirror="dr",state="FAILED"} 1
kmirror_partitions{mirror="dr",state="INITIALIZING"} 0
kmirror_partitions{mirror="dr",state="MIRRORING"} 1
kmirror_partitions{mirror="dr",state="PAUSED"} 0
kmirror_partitions{mirror="dr",state="PREPARING"} 0
kmirror_partitions{mirror="dr",state="SOMETHING_NEW"} 2
kmirror_partitions{mirror="dr",state="STOPPED"} 0
kmirror_partitions{mirror="dr",state="STOPPING"} 0
# HELP kmirror_topic_error 1 while the topic is not mirrored because of an error (creation, config sync, preflight), else 0.
# TYPE kmirror_topic_error gauge
kmirror_topic_error{mirror="dr",topic="gone"} 1
kmirror_topic_error{mirror="dr",topic="orders"} 0
# HELP kmirror_mirror_buffered_bytes Bytes the mirror's fetchers hold, fetched but not yet written.
# TYPE kmirror_mirror_buffered_bytes gauge
kmirror_mirror_buffered_bytes{mirror="down"} 0
kmirror_mirror_buffered_bytes{mirror="dr"} 4096
# HELP kmirror_mirror_fetch_requests_total Fetch requests the mirror's fetch loops sent to source brokers (KIP-1279 RequestsPerSec).
# TYPE kmirror_mirror_fetch_requests_total counter
kmirror_mirror_fetch_requests_total{mirror="down"} 0
kmirror_mirror_fetch_requests_total{mirror="dr"} 40
# HELP kmirror_mirror_fetch_errors_total Fetch requests of the mirror that failed (transport or request-level error).
# TYPE kmirror_mirror_fetch_errors_total counter
kmirror_mirror_fetch_errors_total{mirror="down"} 0
kmirror_mirror_fetch_errors_total{mirror="dr"} 3
# HELP kmirror_mirror_fetched_bytes_total Record batch bytes the mirror fetched from the source (KIP-1279 BytesPerSec, before writing).
# TYPE kmirror_mirror_fetched_bytes_total counter
kmirror_mirror_fetched_bytes_total{mirror="down"} 0
kmirror_mirror_fetched_bytes_total{mirror="dr"} 123456
# HELP kmirror_mirror_dead_fetchers Source broker fetch loops of the mirror whose last fetch failed; they retry with backoff (KIP-1279 DeadThreadCount).
# TYPE kmirror_mirror_dead_fetchers gauge
kmirror_mirror_dead_fetchers{mirror="down"} 0
kmirror_mirror_dead_fetchers{mirror="dr"} 1
# HELP kmirror_mirror_throttle_rate_bytes_per_second Ceiling of the mirror's replication throttle in bytes per second, 0 without one (KIP-1279 mirror.replication.throttled.rate).
# TYPE kmirror_mirror_throttle_rate_bytes_per_second gauge
kmirror_mirror_throttle_rate_bytes_per_second{mirror="down"} 0
kmirror_mirror_throttle_rate_bytes_per_second{mirror="dr"} 1.048576e+06
# HELP kmirror_mirror_throttled_seconds_total Time the mirror's throttle held its throttled partitions back.
# TYPE kmirror_mirror_throttled_seconds_total counter
kmirror_mirror_throttled_seconds_total{mirror="down"} 0
kmirror_mirror_throttled_seconds_total{mirror="dr"} 2.5
`
	names := []string{
		"kmirror_failed_partitions", "kmirror_lost_records_total", "kmirror_mirror_error", "kmirror_mirror_max_lag_records",
		"kmirror_mirrored_bytes_total", "kmirror_mirrored_records_total", "kmirror_partition_lag_records",
		"kmirror_partition_lag_seconds", "kmirror_partition_retries_total", "kmirror_partitions", "kmirror_topic_error",
		"kmirror_mirror_buffered_bytes",
		"kmirror_mirror_fetch_requests_total", "kmirror_mirror_fetch_errors_total", "kmirror_mirror_fetched_bytes_total",
		"kmirror_mirror_dead_fetchers", "kmirror_mirror_throttle_rate_bytes_per_second", "kmirror_mirror_throttled_seconds_total",
	}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// TestCollectorNoSource: before the coordinator exists only the agent-wide
// fetch and write counters are reported (requests of three kinds, items of
// two, coordinator transactions), not empty mirror series.
func TestCollectorNoSource(t *testing.T) {
	c := metrics.NewCollector()
	n, err := testutil.GatherAndCount(metrics.Registry(c), "kmirror_fetch_requests_total", "kmirror_fetch_errors_total", "kmirror_fetch_throttle_seconds_total",
		"kmirror_write_requests_total", "kmirror_write_request_items_total", "kmirror_destination_transactions_total", "kmirror_partitions")
	if err != nil || n != 9 {
		t.Errorf("series without a source: %d, %v", n, err)
	}
}

// TestCollectorSync: each kind of metadata sync has its error counter (the
// KIP's *SyncError), its items and, once it succeeded, its last success.
func TestCollectorSync(t *testing.T) {
	c := metrics.NewCollector()
	c.SetSource(fakeSource{{
		Name: "dr", StateCounts: map[mirrorapi.State]int{},
		Sync: mirrorapi.MetadataSync{
			mirrorapi.SyncConfigs:    {LastSuccess: "2026-11-30T12:00:00Z", Items: 2},
			mirrorapi.SyncPartitions: {LastSuccess: "2026-11-30T12:00:00Z", Items: 6, Errors: 1},
			mirrorapi.SyncGroups:     {LastSuccess: "2026-11-30T12:00:01Z", Items: 4},
			mirrorapi.SyncACLs:       {Errors: 7, LastError: "no authorizer"},
		},
	}})
	want := `
# HELP kmirror_sync_errors_total Failed metadata syncs of the mirror per kind (configs, partitions, groups, acls) since the agent started (KIP-1279 *SyncError).
# TYPE kmirror_sync_errors_total counter
kmirror_sync_errors_total{kind="acls",mirror="dr"} 7
kmirror_sync_errors_total{kind="configs",mirror="dr"} 0
kmirror_sync_errors_total{kind="groups",mirror="dr"} 0
kmirror_sync_errors_total{kind="partitions",mirror="dr"} 1
# HELP kmirror_sync_items Items the last successful metadata sync of the kind found in sync: topics (configs), partitions, consumer groups, ACLs.
# TYPE kmirror_sync_items gauge
kmirror_sync_items{kind="acls",mirror="dr"} 0
kmirror_sync_items{kind="configs",mirror="dr"} 2
kmirror_sync_items{kind="groups",mirror="dr"} 4
kmirror_sync_items{kind="partitions",mirror="dr"} 6
# HELP kmirror_sync_last_success_timestamp_seconds Unix time of the last metadata sync of the kind that completed without error; absent before the first.
# TYPE kmirror_sync_last_success_timestamp_seconds gauge
kmirror_sync_last_success_timestamp_seconds{kind="configs",mirror="dr"} 1.79604e+09
kmirror_sync_last_success_timestamp_seconds{kind="groups",mirror="dr"} 1.796040001e+09
kmirror_sync_last_success_timestamp_seconds{kind="partitions",mirror="dr"} 1.79604e+09
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "kmirror_sync_errors_total", "kmirror_sync_items", "kmirror_sync_last_success_timestamp_seconds"); err != nil {
		t.Error(err)
	}
}

// TestCollectorSyncEveryKind: each kind of mirrorapi's table has its own
// series of each sync metric, labelled with its name.
func TestCollectorSyncEveryKind(t *testing.T) {
	var sync mirrorapi.MetadataSync
	for _, k := range mirrorapi.SyncKinds() {
		sync[k] = mirrorapi.SyncStatus{LastSuccess: "2026-11-30T12:00:00Z", Items: 10 + int(k), Errors: 100 + int64(k)}
	}
	c := metrics.NewCollector()
	c.SetSource(fakeSource{{Name: "dr", StateCounts: map[mirrorapi.State]int{}, Sync: sync}})
	fams, err := metrics.Registry(c).Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]float64{} // metric, kind: value
	for _, f := range fams {
		if !strings.HasPrefix(f.GetName(), "kmirror_sync_") {
			continue // the write counters' kinds are not sync kinds
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() != "kind" {
					continue
				}
				if got[f.GetName()] == nil {
					got[f.GetName()] = map[string]float64{}
				}
				got[f.GetName()][l.GetValue()] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
		}
	}
	for _, k := range mirrorapi.SyncKinds() {
		for metric, want := range map[string]float64{
			"kmirror_sync_errors_total":                   float64(100 + k),
			"kmirror_sync_items":                          float64(10 + k),
			"kmirror_sync_last_success_timestamp_seconds": 1796040000,
		} {
			if v, ok := got[metric][k.String()]; !ok || v != want {
				t.Errorf("%s{kind=%q} = %v (present %v), want %v", metric, k, v, ok, want)
			}
		}
	}
	for metric, kinds := range got {
		if len(kinds) != len(mirrorapi.SyncKinds()) {
			t.Errorf("%s has kinds %v, want each of %v", metric, kinds, mirrorapi.SyncKinds())
		}
	}
}

// TestCollectorLagUnknown: a partition whose source end is not known has no
// lag series (never a 0 that silences an alert) and an infinite source age.
func TestCollectorLagUnknown(t *testing.T) {
	c := metrics.NewCollector()
	c.SetSource(fakeSource{{
		Name: "dr", StateCounts: map[mirrorapi.State]int{mirrorapi.StatePaused: 1},
		Topics: []mirrorapi.Topic{{Name: "orders", Partitions: []mirrorapi.Partition{
			{Partition: 0, State: mirrorapi.StatePaused, Lag: mirrorapi.LagUnknown, DestinationOffset: 40},
		}}},
	}})
	want := `
# HELP kmirror_partition_source_offset_age_seconds Age of the source figures the partition's lag is computed from (+Inf when not read since the agent started): alert when it grows, as lag is then out of date.
# TYPE kmirror_partition_source_offset_age_seconds gauge
kmirror_partition_source_offset_age_seconds{mirror="dr",partition="0",topic="orders"} +Inf
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "kmirror_partition_source_offset_age_seconds", "kmirror_partition_lag_records", "kmirror_partition_lag_seconds"); err != nil {
		t.Error(err)
	}
}
