package topics

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// newCluster starts an in-process kfake cluster (one broker unless opts say
// otherwise) and returns it with an admin client; both close with the test.
func newCluster(t *testing.T, opts ...kfake.Opt) (*kfake.Cluster, *kadm.Client) {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatalf("starting kfake: %v", err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatalf("kafka client: %v", err)
	}
	t.Cleanup(cl.Close)
	return c, kadm.NewClient(cl)
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// topicConfigs returns the configs set on a topic, as kfake stores them.
func topicConfigs(t *testing.T, c *kfake.Cluster, topic string) map[string]string {
	t.Helper()
	ti := c.TopicInfo(topic)
	if ti == nil {
		t.Fatalf("topic %q does not exist", topic)
	}
	m := make(map[string]string, len(ti.Configs))
	for k, v := range ti.Configs {
		if v != nil {
			m[k] = *v
		}
	}
	return m
}

func TestEnsureCreates(t *testing.T) {
	ctx := testContext(t)
	srcC, src := newCluster(t)
	dstC, dst := newCluster(t)
	m := NewManager(dst, src)

	for _, tc := range []struct {
		topic      string
		partitions int32
		source     map[string]string
		want       map[string]string // must be set on the destination
		absent     []string          // must not be set on the destination
	}{{
		topic:      "plain",
		partitions: 3,
		source:     map[string]string{"retention.ms": "3600000"},
		want:       with(map[string]string{"retention.ms": "3600000"}),
	}, {
		topic:      "compacted",
		partitions: 2,
		source:     map[string]string{"cleanup.policy": "compact", "retention.ms": "3600000"},
		want:       with(map[string]string{"cleanup.policy": "compact,delete", "retention.ms": "-1", "retention.bytes": "-1"}),
	}, {
		topic:      "excluded",
		partitions: 1,
		source:     map[string]string{"min.insync.replicas": "2", "leader.replication.throttled.replicas": "*", "segment.ms": "60000"},
		want:       with(map[string]string{"segment.ms": "60000"}),
		absent:     []string{"min.insync.replicas", "leader.replication.throttled.replicas"},
	}, {
		topic:      "big-messages",
		partitions: 1,
		source:     map[string]string{"max.message.bytes": "10485760"},
		want:       with(map[string]string{"max.message.bytes": "10485760"}),
	}, {
		topic:      "log-append-time",
		partitions: 1,
		source: map[string]string{
			"message.timestamp.type":         "LogAppendTime",
			"compression.type":               "zstd",
			"unclean.leader.election.enable": "true",
		},
		want: invariant(),
	}} {
		t.Run(tc.topic, func(t *testing.T) {
			if err := srcC.CreateTopic(tc.topic, tc.partitions, tc.source); err != nil {
				t.Fatal(err)
			}
			info, err := m.Ensure(ctx, tc.topic)
			if err != nil {
				t.Fatalf("Ensure: %v", err)
			}
			srcInfo, dstInfo := srcC.TopicInfo(tc.topic), dstC.TopicInfo(tc.topic)
			if dstInfo == nil {
				t.Fatal("destination topic not created")
			}
			policy := "delete" // kfake's default
			if p, ok := tc.source["cleanup.policy"]; ok {
				policy = p
			}
			wantInfo := Info{
				Topic:                 tc.topic,
				SourceTopicID:         srcInfo.TopicID,
				DestinationTopicID:    dstInfo.TopicID,
				SourcePartitions:      tc.partitions,
				DestinationPartitions: tc.partitions,
				SourceCleanupPolicy:   policy,
				Created:               true,
			}
			if info.SourceCompacted() != (tc.topic == "compacted") {
				t.Errorf("SourceCompacted() = %v", info.SourceCompacted())
			}
			if !infoEqual(info, wantInfo) {
				t.Errorf("Ensure = %+v, want %+v", info, wantInfo)
			}
			if n := len(dstC.PartitionInfos(tc.topic)); n != int(tc.partitions) {
				t.Errorf("destination has %d partitions, want %d", n, tc.partitions)
			}
			got := topicConfigs(t, dstC, tc.topic)
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("destination %s = %q, want %q", k, got[k], v)
				}
			}
			for _, k := range tc.absent {
				if v, ok := got[k]; ok {
					t.Errorf("destination has excluded %s = %q", k, v)
				}
			}

			// A second Ensure finds nothing to do.
			again, err := m.Ensure(ctx, tc.topic)
			if err != nil {
				t.Fatalf("second Ensure: %v", err)
			}
			wantInfo.Created = false
			if !infoEqual(again, wantInfo) {
				t.Errorf("second Ensure = %+v, want %+v", again, wantInfo)
			}
		})
	}
}

// infoEqual compares Infos, treating nil and empty maps and slices alike.
func infoEqual(a, b Info) bool {
	if len(a.ConfigsSet) != len(b.ConfigsSet) || len(a.Warnings) != len(b.Warnings) {
		return false
	}
	for k, v := range a.ConfigsSet {
		if b.ConfigsSet[k] != v {
			return false
		}
	}
	for i := range a.Warnings {
		if a.Warnings[i] != b.Warnings[i] {
			return false
		}
	}
	a.ConfigsSet, b.ConfigsSet, a.Warnings, b.Warnings = nil, nil, nil, nil
	return a.Topic == b.Topic && a.SourceTopicID == b.SourceTopicID && a.DestinationTopicID == b.DestinationTopicID &&
		a.SourceCleanupPolicy == b.SourceCleanupPolicy &&
		a.SourcePartitions == b.SourcePartitions && a.DestinationPartitions == b.DestinationPartitions &&
		a.Created == b.Created && a.PartitionsAdded == b.PartitionsAdded
}

func TestEnsureUsesEffectiveSourceValues(t *testing.T) {
	// The source topic is compacted and allows 2 MB batches through broker
	// settings, not topic overrides. kfake has neither broker setting, so
	// the source's DescribeConfigs answer is replaced with what Kafka
	// would answer: only the DYNAMIC_TOPIC_CONFIG entry is copied, but the
	// effective cleanup.policy and max.message.bytes still decide the
	// invariant's values.
	ctx := testContext(t)
	srcC, src := newCluster(t)
	dstC, dst := newCluster(t)
	if err := srcC.CreateTopic("effective", 1, nil); err != nil {
		t.Fatal(err)
	}
	srcC.ControlKey(32, func(kr kmsg.Request) (kmsg.Response, error, bool) {
		srcC.KeepControl()
		req := kr.(*kmsg.DescribeConfigsRequest)
		if len(req.Resources) != 1 || req.Resources[0].ResourceType != kmsg.ConfigResourceTypeTopic || req.Resources[0].ResourceName != "effective" {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
		res := kmsg.NewDescribeConfigsResponseResource()
		res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeTopic, "effective"
		for _, c := range []struct {
			name, value string
			source      kmsg.ConfigSource
		}{
			{"cleanup.policy", "compact", kmsg.ConfigSourceStaticBrokerConfig},
			{"max.message.bytes", "2000000", kmsg.ConfigSourceDynamicDefaultBrokerConfig},
			{"retention.ms", "604800000", kmsg.ConfigSourceDefaultConfig},
			{"segment.ms", "60000", kmsg.ConfigSourceDynamicTopicConfig},
		} {
			rc := kmsg.NewDescribeConfigsResponseResourceConfig()
			rc.Name, rc.Value, rc.Source = c.name, kmsg.StringPtr(c.value), c.source
			res.Configs = append(res.Configs, rc)
		}
		resp.Resources = append(resp.Resources, res)
		return resp, nil, true
	})

	if _, err := NewManager(dst, src).Ensure(ctx, "effective"); err != nil {
		t.Fatal(err)
	}
	want := with(map[string]string{
		"cleanup.policy":    "compact,delete",
		"retention.ms":      "-1",
		"retention.bytes":   "-1",
		"max.message.bytes": "2000000",
		"segment.ms":        "60000",
	})
	if got := topicConfigs(t, dstC, "effective"); !maps.Equal(got, want) {
		t.Errorf("destination configs\n got %v\nwant %v", got, want)
	}
}

func TestEnsureGrowsPartitions(t *testing.T) {
	ctx := testContext(t)
	srcC, src := newCluster(t)
	dstC, dst := newCluster(t)
	m := NewManager(dst, src)
	if err := srcC.CreateTopic("grow", 3, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Ensure(ctx, "grow"); err != nil {
		t.Fatalf("first Ensure: %v", err)
	}

	// Grow the source through the same admin client the manager uses: the
	// manager must not answer from that client's metadata cache.
	if resp, err := src.UpdatePartitions(ctx, 6, "grow"); err != nil || resp.Error() != nil {
		t.Fatalf("growing the source: %v %v", err, resp.Error())
	}
	n, id, err := m.SourcePartitions(ctx, "grow")
	if err != nil || n != 6 || id != srcC.TopicInfo("grow").TopicID {
		t.Fatalf("SourcePartitions = %d, %v, %v; want 6, %v", n, id, err, kadm.TopicID(srcC.TopicInfo("grow").TopicID))
	}

	info, err := m.Ensure(ctx, "grow")
	if err != nil {
		t.Fatalf("second Ensure: %v", err)
	}
	if info.Created || info.PartitionsAdded != 3 || info.SourcePartitions != 6 || info.DestinationPartitions != 6 {
		t.Errorf("second Ensure = %+v, want 3 partitions added to reach 6", info)
	}
	if got := len(dstC.PartitionInfos("grow")); got != 6 {
		t.Errorf("destination has %d partitions, want 6", got)
	}

	info, err = m.Ensure(ctx, "grow")
	if err != nil || info.PartitionsAdded != 0 || info.DestinationPartitions != 6 {
		t.Errorf("third Ensure = %+v, %v; want nothing added", info, err)
	}
}

func TestEnsureDestinationHasMorePartitions(t *testing.T) {
	ctx := testContext(t)
	srcC, src := newCluster(t)
	dstC, dst := newCluster(t)
	if err := srcC.CreateTopic("shrunk", 2, nil); err != nil {
		t.Fatal(err)
	}
	if err := dstC.CreateTopic("shrunk", 4, nil); err != nil {
		t.Fatal(err)
	}
	info, err := NewManager(dst, src).Ensure(ctx, "shrunk")
	if !errors.Is(err, ErrDestinationHasMorePartitions) {
		t.Fatalf("Ensure error = %v, want ErrDestinationHasMorePartitions", err)
	}
	for _, s := range []string{`"shrunk"`, "4 partitions", "source has 2", "partitions 2..3", "Delete the destination topic"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
	if info.SourcePartitions != 2 || info.DestinationPartitions != 4 {
		t.Errorf("Info = %+v", info)
	}
	if got := len(dstC.PartitionInfos("shrunk")); got != 4 {
		t.Errorf("destination changed to %d partitions", got)
	}
}

func TestEnsureSetsInvariantOnExistingTopic(t *testing.T) {
	ctx := testContext(t)
	srcC, src := newCluster(t)
	dstC, dst := newCluster(t)
	for _, tc := range []struct {
		topic   string
		source  map[string]string
		dest    map[string]string // configs the destination topic was created with
		wantSet map[string]string
		kept    map[string]string // destination values Ensure must not touch
	}{{
		topic: "wrong-compression",
		dest: map[string]string{
			"compression.type":               "gzip",
			"message.timestamp.after.max.ms": "3600000",
			"max.message.bytes":              "20000000", // larger than needed: kept
			"retention.ms":                   "123",      // not managed for a delete-only source
		},
		// message.timestamp.type is CreateTime by kfake's default,
		// but only a topic override protects it from a later change
		// of the broker default.
		wantSet: map[string]string{
			"compression.type":                "producer",
			"message.timestamp.type":          "CreateTime",
			"message.timestamp.after.max.ms":  "9223372036854775807",
			"message.timestamp.before.max.ms": "9223372036854775807",
			"unclean.leader.election.enable":  "false",
		},
		kept: map[string]string{"max.message.bytes": "20000000", "retention.ms": "123"},
	}, {
		topic:  "compacted-source",
		source: map[string]string{"cleanup.policy": "compact", "max.message.bytes": "5000000"},
		dest: map[string]string{
			"cleanup.policy":                  "compact",
			"compression.type":                "producer",
			"message.timestamp.type":          "LogAppendTime",
			"message.timestamp.before.max.ms": "9223372036854775807",
			"message.timestamp.after.max.ms":  "9223372036854775807",
			"unclean.leader.election.enable":  "false",
			"segment.bytes":                   "1048576",
		},
		wantSet: map[string]string{
			"cleanup.policy":         "compact,delete",
			"retention.ms":           "-1",
			"retention.bytes":        "-1",
			"message.timestamp.type": "CreateTime",
			"max.message.bytes":      "5000000",
		},
		kept: map[string]string{"segment.bytes": "1048576"},
	}} {
		t.Run(tc.topic, func(t *testing.T) {
			if err := srcC.CreateTopic(tc.topic, 2, tc.source); err != nil {
				t.Fatal(err)
			}
			if err := dstC.CreateTopic(tc.topic, 2, tc.dest); err != nil {
				t.Fatal(err)
			}
			info, err := NewManager(dst, src).Ensure(ctx, tc.topic)
			if err != nil {
				t.Fatalf("Ensure: %v", err)
			}
			if info.Created {
				t.Error("Ensure says it created an existing topic")
			}
			if !infoEqual(Info{ConfigsSet: info.ConfigsSet}, Info{ConfigsSet: tc.wantSet}) {
				t.Errorf("ConfigsSet = %v, want %v", info.ConfigsSet, tc.wantSet)
			}
			got := topicConfigs(t, dstC, tc.topic)
			for k, v := range tc.wantSet {
				if got[k] != v {
					t.Errorf("destination %s = %q, want %q", k, got[k], v)
				}
			}
			for k, v := range tc.kept {
				if got[k] != v {
					t.Errorf("destination %s = %q, want it kept at %q", k, got[k], v)
				}
			}
		})
	}
}

func TestEnsureSourceTopicMissing(t *testing.T) {
	ctx := testContext(t)
	_, src := newCluster(t)
	dstC, dst := newCluster(t)
	m := NewManager(dst, src)
	_, err := m.Ensure(ctx, "nope")
	if !errors.Is(err, ErrSourceTopicNotFound) || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("Ensure error = %v, want ErrSourceTopicNotFound naming the topic", err)
	}
	if dstC.TopicInfo("nope") != nil {
		t.Error("destination topic created for a missing source topic")
	}
	if _, _, err := m.SourcePartitions(ctx, "nope"); !errors.Is(err, ErrSourceTopicNotFound) {
		t.Errorf("SourcePartitions error = %v, want ErrSourceTopicNotFound", err)
	}
}

func TestEnsureWarnsAboutMinInsyncReplicas(t *testing.T) {
	ctx := testContext(t)
	srcC, src := newCluster(t)
	dstC, dst := newCluster(t, kfake.NumBrokers(3))
	if err := srcC.CreateTopic("durable", 1, nil); err != nil {
		t.Fatal(err)
	}
	// An existing three-replica destination topic with the kfake default
	// min.insync.replicas=1.
	if err := dstC.CreateTopic("durable", 1, nil); err != nil {
		t.Fatal(err)
	}
	var logged strings.Builder
	m := NewManager(dst, src, WithLogger(hclog.New(&hclog.LoggerOptions{Output: &logged, Level: hclog.Warn})))
	// Every Ensure reports the warning; the log has it once.
	for range 3 {
		info, err := m.Ensure(ctx, "durable")
		if err != nil {
			t.Fatal(err)
		}
		if len(info.Warnings) != 1 || !strings.Contains(info.Warnings[0], "min.insync.replicas=1") || !strings.Contains(info.Warnings[0], "3 replicas") {
			t.Fatalf("Warnings = %q, want one about min.insync.replicas", info.Warnings)
		}
	}
	if n := strings.Count(logged.String(), "min.insync.replicas=1"); n != 1 {
		t.Errorf("the warning was logged %d times over 3 syncs, want once:\n%s", n, logged.String())
	}

	resp, err := dst.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "min.insync.replicas", Value: kadm.StringPtr("2")}}, "durable")
	if err != nil || resp[0].Err != nil {
		t.Fatalf("setting min.insync.replicas: %v %v", err, resp)
	}
	if info, err := m.Ensure(ctx, "durable"); err != nil || len(info.Warnings) != 0 {
		t.Fatalf("Ensure = %+v, %v; want no warnings with min.insync.replicas=2", info, err)
	}
	// Back to 1: logged again.
	resp, err = dst.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "min.insync.replicas", Value: kadm.StringPtr("1")}}, "durable")
	if err != nil || resp[0].Err != nil {
		t.Fatalf("setting min.insync.replicas: %v %v", err, resp)
	}
	if _, err := m.Ensure(ctx, "durable"); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logged.String(), "min.insync.replicas=1"); n != 2 {
		t.Errorf("the warning was logged %d times after it came back, want twice:\n%s", n, logged.String())
	}
}

func TestEnsureMaxMessageBytes(t *testing.T) {
	ctx := testContext(t)
	srcC, src := newCluster(t)
	dstC, dst := newCluster(t)
	m := NewManager(dst, src)
	if err := srcC.CreateTopic("big", 1, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Ensure(ctx, "big"); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		batch   int32
		changed bool
		want    string
	}{
		{1000, false, "1048588"},
		{3000000, true, "3000000"},
		{2000000, false, "3000000"}, // never lowered
	} {
		changed, err := m.EnsureMaxMessageBytes(ctx, "big", step.batch)
		if err != nil || changed != step.changed {
			t.Fatalf("EnsureMaxMessageBytes(%d) = %v, %v; want %v", step.batch, changed, err, step.changed)
		}
		if got := topicConfigs(t, dstC, "big")["max.message.bytes"]; got != step.want {
			t.Fatalf("after EnsureMaxMessageBytes(%d): max.message.bytes = %q, want %q", step.batch, got, step.want)
		}
	}
	// Ensure keeps the raised value.
	info, err := m.Ensure(ctx, "big")
	if err != nil || len(info.ConfigsSet) != 0 {
		t.Fatalf("Ensure = %+v, %v; want nothing set", info, err)
	}
	if got := topicConfigs(t, dstC, "big")["max.message.bytes"]; got != "3000000" {
		t.Fatalf("Ensure changed max.message.bytes to %q", got)
	}
}
