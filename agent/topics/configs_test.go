package topics

import (
	"maps"
	"slices"
	"testing"
)

// invariant is what every destination topic gets on top of the source's
// configs, with the default max.message.bytes.
func invariant() map[string]string {
	return map[string]string{
		"compression.type":                "producer",
		"message.timestamp.type":          "CreateTime",
		"message.timestamp.before.max.ms": "9223372036854775807",
		"message.timestamp.after.max.ms":  "9223372036854775807",
		"unclean.leader.election.enable":  "false",
		"max.message.bytes":               "1048588",
	}
}

// with returns invariant() plus extra.
func with(extra map[string]string) map[string]string {
	m := invariant()
	maps.Copy(m, extra)
	return m
}

func TestDestinationConfigs(t *testing.T) {
	for _, tc := range []struct {
		name         string
		source       map[string]string
		exclude      []string
		largestBatch int32
		want         map[string]string
	}{{
		name: "no source configs",
		want: invariant(),
	}, {
		name:   "plain configs are copied",
		source: map[string]string{"retention.ms": "3600000", "segment.bytes": "1048576"},
		want:   with(map[string]string{"retention.ms": "3600000", "segment.bytes": "1048576"}),
	}, {
		name: "KIP default exclude list and mirror.name are not copied",
		source: map[string]string{
			"min.insync.replicas":                     "2",
			"follower.replication.throttled.replicas": "0:1",
			"leader.replication.throttled.replicas":   "*",
			"mirror.name":                             "m1",
			"message.timestamp.difference.max.ms":     "1000",
			"retention.bytes":                         "1000",
		},
		want: with(map[string]string{"retention.bytes": "1000"}),
	}, {
		name:    "custom exclude list replaces the default, mirror.name still dropped",
		source:  map[string]string{"min.insync.replicas": "2", "retention.ms": "1", "mirror.name": "m1"},
		exclude: []string{" retention.ms "},
		want:    with(map[string]string{"min.insync.replicas": "2"}),
	}, {
		name:    "empty exclude list copies everything but mirror.name, invariant still wins",
		source:  map[string]string{"min.insync.replicas": "2", "message.timestamp.type": "LogAppendTime"},
		exclude: []string{},
		want:    with(map[string]string{"min.insync.replicas": "2"}),
	}, {
		name: "invariant overrides the source",
		source: map[string]string{
			"compression.type":                "zstd",
			"message.timestamp.type":          "LogAppendTime",
			"message.timestamp.after.max.ms":  "3600000",
			"message.timestamp.before.max.ms": "3600000",
			"unclean.leader.election.enable":  "true",
		},
		exclude: []string{},
		want:    invariant(),
	}, {
		name:   "compacted source gets compact,delete with infinite retention",
		source: map[string]string{"cleanup.policy": "compact", "retention.ms": "3600000", "retention.bytes": "1000"},
		want:   with(map[string]string{"cleanup.policy": "compact,delete", "retention.ms": "-1", "retention.bytes": "-1"}),
	}, {
		name:   "compact,delete source the same",
		source: map[string]string{"cleanup.policy": "delete, compact"},
		want:   with(map[string]string{"cleanup.policy": "compact,delete", "retention.ms": "-1", "retention.bytes": "-1"}),
	}, {
		name:   "delete-only source keeps its retention",
		source: map[string]string{"cleanup.policy": "delete", "retention.ms": "3600000"},
		want:   with(map[string]string{"cleanup.policy": "delete", "retention.ms": "3600000"}),
	}, {
		name:   "larger source max.message.bytes carried over",
		source: map[string]string{"max.message.bytes": "10485760"},
		want:   with(map[string]string{"max.message.bytes": "10485760"}),
	}, {
		name:   "smaller source max.message.bytes raised to Kafka's default",
		source: map[string]string{"max.message.bytes": "1000"},
		want:   invariant(),
	}, {
		name:         "largest batch seen wins over the source's limit",
		source:       map[string]string{"max.message.bytes": "2000000"},
		largestBatch: 3000000,
		want:         with(map[string]string{"max.message.bytes": "3000000"}),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := DestinationConfigs(tc.source, tc.exclude, tc.largestBatch)
			if !maps.Equal(got, tc.want) {
				t.Errorf("DestinationConfigs(%v, %q, %d)\n got %v\nwant %v", tc.source, tc.exclude, tc.largestBatch, got, tc.want)
			}
		})
	}
}

func TestDestinationConfigsDoesNotModifyInput(t *testing.T) {
	source := map[string]string{"cleanup.policy": "compact", "compression.type": "zstd"}
	before := maps.Clone(source)
	DestinationConfigs(source, nil, 0)
	if !maps.Equal(source, before) {
		t.Fatalf("source changed to %v", source)
	}
}

func TestSatisfies(t *testing.T) {
	for _, tc := range []struct {
		key, want, have string
		ok              bool
	}{
		{"max.message.bytes", "1048588", "1048588", true},
		{"max.message.bytes", "1048588", "20000000", true},
		{"max.message.bytes", "2000000", "1048588", false},
		{"max.message.bytes", "2000000", "garbage", false},
		{"cleanup.policy", "compact,delete", "delete,compact", true},
		{"cleanup.policy", "compact,delete", "compact", false},
		{"unclean.leader.election.enable", "false", "FALSE", true},
		{"unclean.leader.election.enable", "false", "true", false},
		{"compression.type", "producer", "gzip", false},
		{"message.timestamp.after.max.ms", "9223372036854775807", "3600000", false},
	} {
		if got := Satisfies(tc.key, tc.want, tc.have); got != tc.ok {
			t.Errorf("Satisfies(%q, %q, %q) = %v, want %v", tc.key, tc.want, tc.have, got, tc.ok)
		}
	}
}

func TestManaged(t *testing.T) {
	for _, k := range InvariantKeys() {
		if !Managed(k, "delete") {
			t.Errorf("invariant key %q not managed", k)
		}
	}
	for _, tc := range []struct {
		key, policy string
		ok          bool
	}{
		{"cleanup.policy", "compact", true},
		{"retention.ms", "compact,delete", true},
		{"retention.bytes", "compact", true},
		{"cleanup.policy", "delete", false},
		{"retention.ms", "", false},
		{"min.insync.replicas", "compact", false},
		{"segment.bytes", "compact", false},
	} {
		if got := Managed(tc.key, tc.policy); got != tc.ok {
			t.Errorf("Managed(%q, %q) = %v, want %v", tc.key, tc.policy, got, tc.ok)
		}
	}
}

// TestCopied: Copied agrees with DestinationConfigs on which source keys are
// copied, for the default and a custom exclude list.
func TestCopied(t *testing.T) {
	for _, tc := range []struct {
		key     string
		exclude []string
		ok      bool
	}{
		{"retention.ms", nil, true},
		{"min.insync.replicas", nil, false},
		{"mirror.name", []string{}, false},
		{"message.timestamp.difference.max.ms", []string{}, false},
		{"min.insync.replicas", []string{"retention.ms"}, true},
		{"retention.ms", []string{" retention.ms"}, false},
	} {
		if got := Copied(tc.key, tc.exclude); got != tc.ok {
			t.Errorf("Copied(%q, %q) = %v, want %v", tc.key, tc.exclude, got, tc.ok)
		}
		_, copied := DestinationConfigs(map[string]string{tc.key: "1"}, tc.exclude, 0)[tc.key]
		if copied != tc.ok {
			t.Errorf("DestinationConfigs copies %q with exclude %q: %v, Copied says %v", tc.key, tc.exclude, copied, tc.ok)
		}
	}
}

func TestExportedListsAreCopies(t *testing.T) {
	k := InvariantKeys()
	if !slices.IsSorted(k) || !slices.Contains(k, "max.message.bytes") || !slices.Contains(k, "compression.type") {
		t.Errorf("InvariantKeys() = %v", k)
	}
	k[0] = "changed"
	if InvariantKeys()[0] == "changed" {
		t.Error("InvariantKeys shares its slice")
	}
}
