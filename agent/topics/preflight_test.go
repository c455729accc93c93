package topics

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

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
		want         []expected
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
		name: "destination transaction.max.timeout.ms below the source's",
		dst: []kfake.Opt{kfake.BrokerConfigs(map[string]string{
			"producer.id.expiration.ms":  longExpiry,
			"transaction.max.timeout.ms": "60000",
		})},
		want: []expected{{Warn, Destination, "transaction.max.timeout.ms", "60000",
			[]string{"1m", "15m", "at least 900000", "1800000", "not dynamic"}}},
	}, {
		name: "source transaction.max.timeout.ms above the destination's",
		dst:  []kfake.Opt{kfake.BrokerConfigs(map[string]string{"producer.id.expiration.ms": longExpiry})},
		src:  []kfake.Opt{kfake.BrokerConfigs(map[string]string{"transaction.max.timeout.ms": "3600000"})},
		want: []expected{{Warn, Destination, "transaction.max.timeout.ms", "900000",
			[]string{"15m", "1h", "at least 3600000"}}},
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
			"producer.id.expiration.ms":  "1000",
			"transaction.max.timeout.ms": "1000",
		})},
		sourceTopics: map[string]map[string]string{"t": nil},
		want: []expected{
			{Refuse, Destination, "transaction.partition.verification.enable", "true", nil},
			{Warn, Destination, "producer.id.expiration.ms", "1000", nil},
			{Warn, Destination, "transaction.max.timeout.ms", "1000", nil},
		},
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

			fs, err := Preflight(ctx, dst, src, tc.topics...)
			if err != nil {
				t.Fatalf("Preflight: %v", err)
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
			again, err := Preflight(ctx, dst, src, tc.topics...)
			if err != nil || !slices.Equal(fs, again) {
				t.Errorf("second Preflight differs (%v):\n%s\nvs\n%s", err, again, fs)
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
