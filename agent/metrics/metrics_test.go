package metrics_test

// Scrapes /metrics over HTTP from a real coordinator mirroring between two
// dev clusters, and checks the series against what was produced and what
// describe says.

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/coordinator"
	"github.com/kmirror/kmirror/agent/coordinator/coordinatortest"
	"github.com/kmirror/kmirror/agent/metrics"
	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/mirrorspec"
)

type scrape map[string]*dto.MetricFamily

func scrapeURL(t *testing.T, url string) scrape {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing %s: %v", url, err)
	}
	return fams
}

// value returns the sample of name whose labels include want.
func (s scrape) value(name string, want map[string]string) (float64, bool) {
	f, ok := s[name]
	if !ok {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		switch f.GetType() {
		case dto.MetricType_COUNTER:
			return m.GetCounter().GetValue(), true
		case dto.MetricType_GAUGE:
			return m.GetGauge().GetValue(), true
		default:
			return m.GetUntyped().GetValue(), true
		}
	}
	return 0, false
}

func part(topic string, p int32) map[string]string {
	return map[string]string{"mirror": "dr", "topic": topic, "partition": fmt.Sprint(p)}
}

func TestScrapeCoordinator(t *testing.T) {
	src := devclustertest.Start(t, devcluster.Name("src"),
		devcluster.KfakeOptions(kfake.SeedTopics(2, "orders"), kfake.SeedTopics(1, "events")))
	dst := devclustertest.Start(t, devcluster.Name("dst"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	co := coordinatortest.Start(t, coordinator.Config{
		Destination:     []kgo.Opt{kgo.SeedBrokers(dst.Bootstrap()...)},
		RefreshInterval: 200 * time.Millisecond,
	}).Coordinator

	c := metrics.NewCollector()
	srv := httptest.NewServer(metrics.Handler(metrics.Registry(c)))
	defer srv.Close()
	url := srv.URL + "/metrics"

	// Before SetSource: fetch, Go and process series, no mirror series.
	s := scrapeURL(t, url)
	for _, name := range []string{"kmirror_fetch_requests_total", "kmirror_fetch_errors_total", "kmirror_fetch_throttle_seconds_total", "go_goroutines", "go_memstats_alloc_bytes", "process_cpu_seconds_total", "process_resident_memory_bytes"} {
		if _, ok := s[name]; !ok {
			t.Errorf("no %s before the source is set", name)
		}
	}
	if _, ok := s["kmirror_partitions"]; ok {
		t.Error("kmirror_partitions before the source is set")
	}
	c.SetSource(co)

	if err := co.Create(ctx, mirrorspec.Spec{Name: "dr", Source: mirrorapi.Source{BootstrapServers: src.Bootstrap()}, Topics: []string{"orders", "events"}}); err != nil {
		t.Fatal(err)
	}
	type tpn struct {
		topic string
		p     int32
		n     int
	}
	parts := []tpn{{"orders", 0, 5}, {"orders", 1, 3}, {"events", 0, 2}}
	produced := map[string]int{}
	cl, err := kgo.NewClient(kgo.SeedBrokers(src.Bootstrap()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var rs []*kgo.Record
	for _, tp := range parts {
		produced[fmt.Sprintf("%s/%d", tp.topic, tp.p)] = tp.n
		for i := range tp.n {
			rs = append(rs, &kgo.Record{Topic: tp.topic, Partition: tp.p, Value: fmt.Appendf(nil, "v%d", i)})
		}
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	// Wait until the scrape shows every record mirrored and no lag.
	deadline := time.Now().Add(30 * time.Second)
	for {
		s = scrapeURL(t, url)
		ok := true
		for _, tp := range parts {
			recs, ok1 := s.value("kmirror_mirrored_records_total", part(tp.topic, tp.p))
			lag, ok2 := s.value("kmirror_partition_lag_records", part(tp.topic, tp.p))
			ok = ok && ok1 && ok2 && recs == float64(tp.n) && lag == 0
		}
		if n, _ := s.value("kmirror_partitions", map[string]string{"mirror": "dr", "state": "MIRRORING"}); n != 3 {
			ok = false
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not caught up in the scrape; describe: %+v", co.Describe())
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Every figure against describe, read after the scrape (nothing is
	// produced meanwhile, so they must agree).
	ms := co.Describe()
	if len(ms) != 1 {
		t.Fatalf("describe: %+v", ms)
	}
	m := ms[0]
	mirror := map[string]string{"mirror": "dr"}
	check := func(name string, labels map[string]string, want float64) {
		t.Helper()
		if got, ok := s.value(name, labels); !ok || got != want {
			t.Errorf("%s%v = %v (present %v), want %v", name, labels, got, ok, want)
		}
	}
	check("kmirror_mirror_max_lag_records", mirror, 0)
	check("kmirror_failed_partitions", mirror, 0)
	check("kmirror_mirror_error", mirror, 0)
	for _, st := range metrics.States {
		want := 0.0
		if st == mirrorapi.StateMirroring {
			want = 3
		}
		check("kmirror_partitions", map[string]string{"mirror": "dr", "state": string(st)}, want)
	}
	for _, topic := range m.Topics {
		check("kmirror_topic_error", map[string]string{"mirror": "dr", "topic": topic.Name}, 0)
		for _, p := range topic.Partitions {
			l := part(topic.Name, p.Partition)
			if p.Bytes <= 0 || p.Records != int64(produced[fmt.Sprintf("%s/%d", topic.Name, p.Partition)]) {
				t.Errorf("describe %s/%d: %+v", topic.Name, p.Partition, p)
			}
			check("kmirror_mirrored_records_total", l, float64(p.Records))
			check("kmirror_mirrored_bytes_total", l, float64(p.Bytes))
			check("kmirror_lost_records_total", l, 0)
			check("kmirror_partition_retries_total", l, float64(p.Retries))
			check("kmirror_partition_lag_records", l, 0)
			check("kmirror_partition_lag_seconds", l, 0)
		}
	}
	if n, _ := s.value("kmirror_fetch_requests_total", nil); n < 1 {
		t.Errorf("kmirror_fetch_requests_total = %v after mirroring", n)
	}
	// Every record was written in a produce request of some batches.
	produce := map[string]string{"kind": "produce"}
	if n, _ := s.value("kmirror_write_requests_total", produce); n < 1 {
		t.Errorf("kmirror_write_requests_total{kind=produce} = %v after mirroring", n)
	} else if b, _ := s.value("kmirror_write_request_items_total", produce); b < n {
		t.Errorf("kmirror_write_request_items_total{kind=produce} = %v, below the %v requests", b, n)
	}
	// The destination brokers the agent wrote to, measured near (loopback):
	// one connection each.
	measured := 0
	for _, addr := range dst.Bootstrap() {
		broker := map[string]string{"broker": addr}
		rtt, ok := s.value("kmirror_destination_round_trip_seconds", broker)
		if !ok {
			continue
		}
		measured++
		if conns, _ := s.value("kmirror_destination_connections", broker); rtt <= 0 || conns != 1 {
			t.Errorf("destination broker %s: round trip %v s, %v connections; want a measured one and 1", addr, rtt, conns)
		}
	}
	if measured == 0 {
		t.Errorf("kmirror_destination_round_trip_seconds: no series for the destination's brokers %v", dst.Bootstrap())
	}
	if n, _ := s.value("kmirror_mirror_fetch_requests_total", mirror); n < 1 || float64(m.Fetch.Requests) < n {
		t.Errorf("kmirror_mirror_fetch_requests_total = %v after mirroring; describe says %d later", n, m.Fetch.Requests)
	}
	if n, _ := s.value("kmirror_mirror_fetched_bytes_total", mirror); n < 1 {
		t.Errorf("kmirror_mirror_fetched_bytes_total = %v after mirroring", n)
	}
	check("kmirror_mirror_dead_fetchers", mirror, 0)
	check("kmirror_mirror_throttle_rate_bytes_per_second", mirror, 0)

	// A throttle shows its ceiling at once, and 0 again once removed.
	if err := co.SetThrottle(ctx, "dr", mirrorapi.Throttle{RateBytesPerSecond: 250000}); err != nil {
		t.Fatal(err)
	}
	s = scrapeURL(t, url)
	check("kmirror_mirror_throttle_rate_bytes_per_second", mirror, 250000)
	if err := co.RemoveThrottle(ctx, "dr"); err != nil {
		t.Fatal(err)
	}
	s = scrapeURL(t, url)
	check("kmirror_mirror_throttle_rate_bytes_per_second", mirror, 0)

	// A paused topic moves between the state series.
	if err := co.PauseTopics(ctx, "dr", []string{"orders"}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; {
		s = scrapeURL(t, url)
		paused, _ := s.value("kmirror_partitions", map[string]string{"mirror": "dr", "state": "PAUSED"})
		mirroring, _ := s.value("kmirror_partitions", map[string]string{"mirror": "dr", "state": "MIRRORING"})
		if paused == 2 && mirroring == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after pausing orders: PAUSED %v, MIRRORING %v", paused, mirroring)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
