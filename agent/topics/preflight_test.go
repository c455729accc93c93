package topics

import (
	"cmp"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// expected is the part of a finding a test pins exactly; the message is
// checked for substrings.
type expected struct {
	sev      Severity
	cluster  string
	setting  string
	value    string
	contains []string
}

// longExpiry is a destination producer.id.expiration.ms above kfake's
// default topic retention (7 days), so that cases about something else do
// not also get the expiry warning.
const longExpiry = "691200000"

func TestPreflight(t *testing.T) {
	produceV2 := kversion.Stable()
	produceV2.SetMaxKeyVersion(0, 2)

	for _, tc := range []struct {
		name         string
		dst, src     []kfake.Opt
		sourceTopics map[string]map[string]string
		topics       []string
		bootstrap    []string
		want         []expected
		// timeout is the transaction timeout Check must choose (zero:
		// Kafka's default of 15m, which kfake reports), and from a part
		// of where it says it comes from.
		timeout time.Duration
		from    string
	}{{
		name: "Kafka defaults: producer state expires before the source's 7-day retention",
		sourceTopics: map[string]map[string]string{
			"week": nil,
		},
		want: []expected{{Warn, Destination, "producer.id.expiration.ms", "86400000 (default)",
			[]string{`source topic "week"`, "7d", "--entity-default", "producer.id.expiration.ms=691200000"}}},
	}, {
		name: "producer.id.expiration.ms=1000 against the named topic's retention",
		dst:  []kfake.Opt{kfake.BrokerConfigs(map[string]string{"producer.id.expiration.ms": "1000"})},
		sourceTopics: map[string]map[string]string{
			"hour":     {"retention.ms": "3600000"},
			"not-ours": {"retention.ms": "999999999999"},
		},
		topics: []string{"hour"},
		want: []expected{{Warn, Destination, "producer.id.expiration.ms", "1000",
			[]string{`source topic "hour"`, "1h", "after 1s", "producer.id.expiration.ms=90000000"}}},
	}, {
		name: "long enough producer.id.expiration.ms: nothing to say",
		dst:  []kfake.Opt{kfake.BrokerConfigs(map[string]string{"producer.id.expiration.ms": longExpiry})},
		sourceTopics: map[string]map[string]string{
			"week": nil,
		},
	}, {
		name: "source topics kept forever",
		dst:  []kfake.Opt{kfake.BrokerConfigs(map[string]string{"producer.id.expiration.ms": longExpiry})},
		sourceTopics: map[string]map[string]string{
			"forever":   {"retention.ms": "-1"},
			"compacted": {"cleanup.policy": "compact"},
			"both":      {"cleanup.policy": "compact,delete"},
		},
		want: []expected{{Warn, Destination, "producer.id.expiration.ms", longExpiry,
			[]string{`["compacted" "forever"]`, "without a time limit", "8d"}}},
	}, {
		name: "a mirror without topics skips the source's __ topics, such as another agent's state topic",
		dst:  []kfake.Opt{kfake.BrokerConfigs(map[string]string{"producer.id.expiration.ms": longExpiry})},
		sourceTopics: map[string]map[string]string{
			"__kmirror_state": {"cleanup.policy": "compact", "retention.ms": "-1"},
			"week":            nil,
		},
	}, {
		name: "Kafka defaults on both: the destination's 15m is the timeout",
		dst:  []kfake.Opt{kfake.BrokerConfigs(map[string]string{"producer.id.expiration.ms": longExpiry})},
		from: "destination transaction.max.timeout.ms=900000 (lowest, on broker(s) [0])",
	}, {
		name: "the destination allows longer than the source: its maximum is the timeout",
		dst: []kfake.Opt{kfake.BrokerConfigs(map[string]string{
			"producer.id.expiration.ms":  longExpiry,
			"transaction.max.timeout.ms": "3600000",
		})},
		timeout: time.Hour,
		from:    "destination transaction.max.timeout.ms=3600000",
	}, {
		name: "the same maximum on both is enough",
		dst: []kfake.Opt{kfake.BrokerConfigs(map[string]string{
			"producer.id.expiration.ms":  longExpiry,
			"transaction.max.timeout.ms": "3600000",
		})},
		src:     []kfake.Opt{kfake.BrokerConfigs(map[string]string{"transaction.max.timeout.ms": "3600000"})},
		timeout: time.Hour,
	}, {
		name: "destination transaction.max.timeout.ms below the source's: refused, with the server.properties line",
		dst: []kfake.Opt{kfake.BrokerConfigs(map[string]string{
			"producer.id.expiration.ms":  longExpiry,
			"transaction.max.timeout.ms": "60000",
		})},
		want: []expected{{Refuse, Destination, "transaction.max.timeout.ms", "60000",
			[]string{"allow transactions of 1m but source broker(s) [0] allow 15m", "unplanned offset",
				"transaction.max.timeout.ms=1800000 (at least 900000", "server.properties", "restart", "static", "at most 60000"}}},
		timeout: time.Minute,
	}, {
		name: "source transaction.max.timeout.ms above the destination's: refused",
		dst:  []kfake.Opt{kfake.BrokerConfigs(map[string]string{"producer.id.expiration.ms": longExpiry})},
		src:  []kfake.Opt{kfake.BrokerConfigs(map[string]string{"transaction.max.timeout.ms": "3600000"})},
		want: []expected{{Refuse, Destination, "transaction.max.timeout.ms", "900000",
			[]string{"15m", "1h", "transaction.max.timeout.ms=7200000 (at least 3600000"}}},
	}, {
		name: "transactional.id.expiration.ms below 7 days",
		dst: []kfake.Opt{kfake.BrokerConfigs(map[string]string{
			"producer.id.expiration.ms":      longExpiry,
			"transactional.id.expiration.ms": "3600000",
		})},
		want: []expected{{Warn, Destination, "transactional.id.expiration.ms", "3600000",
			[]string{"after 1h", ".fill and .abort", "INVALID_PRODUCER_ID_MAPPING", "initializes the id again",
				"transactional.id.expiration.ms=604800000 (7d", "server.properties", "static"}}},
	}, {
		name: "transactional.id.expiration.ms at 7 days",
		dst: []kfake.Opt{kfake.BrokerConfigs(map[string]string{
			"producer.id.expiration.ms":      longExpiry,
			"transactional.id.expiration.ms": "604800000",
		})},
	}, {
		name:         "the fixing command names the destination's bootstrap servers",
		sourceTopics: map[string]map[string]string{"week": nil},
		bootstrap:    []string{"dst-1:9092", "dst-2:9092"},
		want: []expected{{Warn, Destination, "producer.id.expiration.ms", "86400000 (default)",
			[]string{"kafka-configs.sh --bootstrap-server dst-1:9092,dst-2:9092 --entity-type brokers --entity-default --alter --add-config producer.id.expiration.ms=691200000"}}},
	}, {
		name: "Kafka 3.6 with transaction verification on (its default)",
		dst: []kfake.Opt{kfake.MaxVersions(kversion.V3_6_0()),
			kfake.BrokerConfigs(map[string]string{"producer.id.expiration.ms": longExpiry})},
		want: []expected{{Refuse, Destination, "transaction.partition.verification.enable", "true",
			[]string{"KAFKA-15653", "transaction.partition.verification.enable=false"}}},
	}, {
		name: "Kafka 3.6 with transaction verification off",
		dst: []kfake.Opt{kfake.MaxVersions(kversion.V3_6_0()), kfake.BrokerConfigs(map[string]string{
			"producer.id.expiration.ms":                 longExpiry,
			"transaction.partition.verification.enable": "false",
		})},
	}, {
		name: "Kafka 3.7 is not 3.6",
		dst: []kfake.Opt{kfake.MaxVersions(kversion.V3_7_0()),
			kfake.BrokerConfigs(map[string]string{"producer.id.expiration.ms": longExpiry})},
	}, {
		name: "Kafka 3.5 destination",
		dst: []kfake.Opt{kfake.MaxVersions(kversion.V3_5_0()),
			kfake.BrokerConfigs(map[string]string{"producer.id.expiration.ms": longExpiry})},
		want: []expected{{Refuse, Destination, "broker version", "before 3.6 (AddPartitionsToTxn v3)",
			[]string{"predate Kafka 3.6", "message.timestamp.before.max.ms"}}},
	}, {
		name: "no Produce v3 on the destination",
		dst: []kfake.Opt{kfake.MaxVersions(produceV2),
			kfake.BrokerConfigs(map[string]string{"producer.id.expiration.ms": longExpiry})},
		want: []expected{{Refuse, Destination, "api Produce", "v2",
			[]string{"magic 2", "Produce v3+", "Kafka 0.11+", "[0]"}}},
	}, {
		name: "replicated destination with min.insync.replicas=1",
		dst: []kfake.Opt{kfake.NumBrokers(3),
			kfake.BrokerConfigs(map[string]string{"producer.id.expiration.ms": longExpiry})},
		want: []expected{{Warn, Destination, "min.insync.replicas", "1",
			[]string{"3 replicas", "min.insync.replicas=2"}}},
	}, {
		name: "replicated destination with min.insync.replicas=2",
		dst: []kfake.Opt{kfake.NumBrokers(3), kfake.BrokerConfigs(map[string]string{
			"producer.id.expiration.ms": longExpiry,
			"min.insync.replicas":       "2",
		})},
	}, {
		name: "several findings come refusals first, then by setting",
		dst: []kfake.Opt{kfake.MaxVersions(kversion.V3_6_0()), kfake.BrokerConfigs(map[string]string{
			"producer.id.expiration.ms":      "1000",
			"transaction.max.timeout.ms":     "1000",
			"transactional.id.expiration.ms": "1000",
		})},
		sourceTopics: map[string]map[string]string{"t": nil},
		want: []expected{
			{Refuse, Destination, "transaction.max.timeout.ms", "1000", nil},
			{Refuse, Destination, "transaction.partition.verification.enable", "true", nil},
			{Warn, Destination, "producer.id.expiration.ms", "1000", nil},
			{Warn, Destination, "transactional.id.expiration.ms", "1000", nil},
		},
		timeout: time.Second,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			srcC, src := newCluster(t, tc.src...)
			_, dst := newCluster(t, tc.dst...)
			for name, cfgs := range tc.sourceTopics {
				if err := srcC.CreateTopic(name, 1, cfgs); err != nil {
					t.Fatal(err)
				}
			}

			opts := CheckOptions{Topics: tc.topics, DestinationBootstrap: tc.bootstrap}
			r, err := Check(ctx, dst, src, opts)
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			fs := r.Findings
			if want := cmp.Or(tc.timeout, DefaultTxnTimeout); r.TxnTimeout != want {
				t.Errorf("TxnTimeout = %v, want %v", r.TxnTimeout, want)
			}
			if !strings.Contains(r.TxnTimeoutFrom, tc.from) || !strings.Contains(r.TxnTimeoutFrom, "destination transaction.max.timeout.ms=") {
				t.Errorf("TxnTimeoutFrom = %q, want the destination's setting and %q", r.TxnTimeoutFrom, tc.from)
			}
			if len(fs) != len(tc.want) {
				t.Fatalf("Preflight found %d, want %d:\n%s", len(fs), len(tc.want), fs)
			}
			for i, w := range tc.want {
				f := fs[i]
				if f.Severity != w.sev || f.Cluster != w.cluster || f.Setting != w.setting || f.Value != w.value {
					t.Errorf("finding %d = %s\nwant %s %s %s=%s", i, f, w.sev, w.cluster, w.setting, w.value)
				}
				for _, s := range w.contains {
					if !strings.Contains(f.Message, s) {
						t.Errorf("finding %d message %q does not contain %q", i, f.Message, s)
					}
				}
			}

			// Same clusters, same findings.
			again, err := Check(ctx, dst, src, opts)
			if err != nil || !slices.Equal(fs, again.Findings) || again.TxnTimeout != r.TxnTimeout {
				t.Errorf("second Check differs (%v):\n%s\nvs\n%s", err, again.Findings, fs)
			}

			refusing := slices.ContainsFunc(tc.want, func(e expected) bool { return e.sev == Refuse })
			if err := fs.Refusal(); (err != nil) != refusing {
				t.Errorf("Refusal() = %v, want refusal %v", err, refusing)
			}
		})
	}
}

func TestFindingsFormats(t *testing.T) {
	fs := Findings{
		{Refuse, Destination, "api Produce", "v2", "upgrade"},
		{Warn, Destination, "producer.id.expiration.ms", "1000", "raise it"},
	}
	if got, want := fs.String(), "REFUSE destination api Produce=v2: upgrade\nWARN destination producer.id.expiration.ms=1000: raise it"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got := (Findings{}).String(); got != "preflight: no findings" {
		t.Errorf("empty String() = %q", got)
	}

	err := fs.Refusal()
	var re *RefusalError
	if !errors.As(err, &re) || len(re.Findings) != 1 || re.Findings[0].Setting != "api Produce" {
		t.Fatalf("Refusal() = %#v, want a *RefusalError with the one refusal", err)
	}
	if got, want := err.Error(), "preflight refused: REFUSE destination api Produce=v2: upgrade"; got != want {
		t.Errorf("Refusal().Error() = %q, want %q", got, want)
	}
	if err := fs[1:].Refusal(); err != nil {
		t.Errorf("Refusal() of warnings only = %v, want nil", err)
	}

	b, err := json.Marshal(fs[1])
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"severity":"warn","cluster":"destination","setting":"producer.id.expiration.ms","value":"1000","message":"raise it"}`; got != want {
		t.Errorf("JSON = %s, want %s", got, want)
	}
}

func TestHumanMs(t *testing.T) {
	for ms, want := range map[int64]string{
		0: "0ms", 1500: "1500ms", 1000: "1s", 60000: "1m", 900000: "15m",
		3600000: "1h", 86400000: "1d", 604800000: "7d", 90000000: "25h",
	} {
		if got := humanMs(ms); got != want {
			t.Errorf("humanMs(%d) = %q, want %q", ms, got, want)
		}
	}
}

func TestPreflightSkipsUnreachableBroker(t *testing.T) {
	ctx := testContext(t)
	_, src := newCluster(t)
	dstC, dst := newCluster(t, kfake.NumBrokers(2),
		kfake.BrokerConfigs(map[string]string{"producer.id.expiration.ms": longExpiry, "min.insync.replicas": "2"}))
	// Connect to both brokers first, so that only the preflight's own
	// ApiVersions request to broker 1 fails.
	if _, err := dst.ApiVersions(ctx); err != nil {
		t.Fatal(err)
	}
	dstC.ControlKey(18, func(kr kmsg.Request) (kmsg.Response, error, bool) {
		dstC.KeepControl()
		if dstC.CurrentNode() != 1 {
			return nil, nil, false
		}
		resp := kr.ResponseKind().(*kmsg.ApiVersionsResponse)
		resp.ErrorCode = kerr.UnknownServerError.Code
		return resp, nil, true
	})

	fs, err := Preflight(ctx, dst, src)
	if err != nil {
		t.Fatalf("Preflight: %v", err)
	}
	if len(fs) != 1 || fs[0].Severity != Warn || fs[0].Setting != "broker 1" || fs[0].Value != "unreachable" {
		t.Fatalf("Preflight found:\n%s\nwant one warning about broker 1", fs)
	}
}

// configured is a cluster whose broker i reports key=values[i] ("" for a
// broker that does not report it); no values: configs not readable.
func configured(name, key string, values ...string) *cluster {
	c := &cluster{name: name, bootstrap: "<destination>"}
	if len(values) == 0 {
		c.brokers = []int32{0}
		return c
	}
	c.configs = map[int32]map[string]kadm.Config{}
	for i, v := range values {
		b := int32(i)
		c.brokers = append(c.brokers, b)
		c.configs[b] = map[string]kadm.Config{}
		if v != "" {
			c.configs[b][key] = kadm.Config{Key: key, Value: kmsg.StringPtr(v)}
		}
	}
	return c
}

// TestTxnTimeoutDecision pins how the destination transaction timeout is
// chosen from the brokers' transaction.max.timeout.ms and when it is refused.
func TestTxnTimeoutDecision(t *testing.T) {
	const key = "transaction.max.timeout.ms"
	for _, tc := range []struct {
		name     string
		dst, src []string // per broker; src nil: the source's configs are unreadable
		timeout  time.Duration
		from     string
		want     []expected
	}{{
		name: "the lowest destination broker decides", dst: []string{"3600000", "1800000", "3600000"}, src: []string{"900000"},
		timeout: 30 * time.Minute, from: "destination transaction.max.timeout.ms=1800000 (lowest, on broker(s) [1])",
	}, {
		name: "equal to the source", dst: []string{"900000"}, src: []string{"900000"},
		timeout: 15 * time.Minute, from: "destination transaction.max.timeout.ms=900000",
	}, {
		name: "the highest source broker decides the refusal", dst: []string{"1800000", "1800000"}, src: []string{"900000", "3600000", ""},
		timeout: 30 * time.Minute,
		want: []expected{{Refuse, Destination, key, "1800000",
			[]string{"broker(s) [0 1] allow transactions of 30m but source broker(s) [1] allow 1h", "transaction.max.timeout.ms=7200000 (at least 3600000", "at most 1800000"}}},
	}, {
		name: "twice a huge source maximum stays a Kafka int", dst: []string{"60000"}, src: []string{"2000000000"},
		timeout: time.Minute,
		want: []expected{{Refuse, Destination, key, "60000",
			[]string{"transaction.max.timeout.ms=2147483647 (at least 2000000000"}}},
	}, {
		name: "a source broker without the setting counts with Kafka's default", dst: []string{"600000"}, src: []string{"300000", ""},
		timeout: 10 * time.Minute,
		want: []expected{{Refuse, Destination, key, "600000",
			[]string{"source broker(s) [1] allow 15m"}}},
	}, {
		name: "the destination does not report it: the default, said so", dst: []string{""}, src: []string{"900000"},
		timeout: DefaultTxnTimeout, from: "default (Kafka's transaction.max.timeout.ms; the destination's brokers do not report it)",
		want: []expected{{Warn, Destination, key, "unreported",
			[]string{"Kafka's default of 15m", "INVALID_TRANSACTION_TIMEOUT"}}},
	}, {
		name: "the destination does not report it and the source allows more: refused against the default", dst: []string{"", ""}, src: []string{"3600000"},
		timeout: DefaultTxnTimeout,
		want: []expected{
			{Refuse, Destination, key, "900000 (default)", []string{"allow transactions of 15m but source broker(s) [0] allow 1h"}},
			{Warn, Destination, key, "unreported", nil},
		},
	}, {
		name: "the source's configs are unreadable: a warning, not a refusal", dst: []string{"60000"},
		timeout: time.Minute, from: "destination transaction.max.timeout.ms=60000",
		want: []expected{{Warn, Source, key, "unreadable",
			[]string{"not compared with the destination's 1m", "at most 60000"}}},
	}, {
		name: "the source does not report it: a warning", dst: []string{"60000"}, src: []string{""},
		timeout: time.Minute,
		want:    []expected{{Warn, Source, key, "unreadable", nil}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			timeout, from, fs := checkTxnTimeout(configured(Destination, key, tc.dst...), configured(Source, key, tc.src...))
			if timeout != tc.timeout {
				t.Errorf("timeout = %v, want %v", timeout, tc.timeout)
			}
			if !strings.Contains(from, tc.from) {
				t.Errorf("from = %q, want it to contain %q", from, tc.from)
			}
			slices.SortStableFunc(fs, func(a, b Finding) int { return cmp.Compare(b.Severity, a.Severity) })
			if len(fs) != len(tc.want) {
				t.Fatalf("found %d, want %d:\n%s", len(fs), len(tc.want), Findings(fs))
			}
			for i, w := range tc.want {
				f := fs[i]
				if f.Severity != w.sev || f.Cluster != w.cluster || f.Setting != w.setting || f.Value != w.value {
					t.Errorf("finding %d = %s\nwant %s %s %s=%s", i, f, w.sev, w.cluster, w.setting, w.value)
				}
				for _, s := range w.contains {
					if !strings.Contains(f.Message, s) {
						t.Errorf("finding %d message %q does not contain %q", i, f.Message, s)
					}
				}
			}
		})
	}
}

// TestTxnIDExpiryDecision pins the transactional.id.expiration.ms warning:
// below Kafka's 7-day default on any destination broker.
func TestTxnIDExpiryDecision(t *testing.T) {
	const key = "transactional.id.expiration.ms"
	for _, tc := range []struct {
		dst  []string
		want string // the finding's value, "" for none
	}{
		{[]string{""}, ""}, // Kafka's default
		{[]string{"604800000"}, ""},
		{[]string{"2592000000"}, ""},
		{[]string{"604800000", "86400000"}, "86400000"},
		{[]string{"604799999"}, "604799999"},
	} {
		fs := checkTxnIDExpiry(configured(Destination, key, tc.dst...))
		switch {
		case tc.want == "" && len(fs) != 0:
			t.Errorf("%v: %s, want no finding", tc.dst, Findings(fs))
		case tc.want != "" && (len(fs) != 1 || fs[0].Severity != Warn || fs[0].Setting != key || fs[0].Value != tc.want):
			t.Errorf("%v: %s, want one warning with value %s", tc.dst, Findings(fs), tc.want)
		}
	}
}
