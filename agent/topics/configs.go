// Package topics manages the destination side of mirror topics: it creates a
// destination topic with the source's partition count, grows it when the
// source grows, and sets the topic configs the offset-identical invariant
// depends on (DESIGN §3, design-review §1.5, §1.8, §4d). It also runs the
// preflight check of the destination cluster (design-review §4e).
//
// The invariant's configs are SET, not synced: they never come from the source
// and config sync must never override them. DestinationConfigs is the single
// place that decides what a destination topic's configs must be; Managed and
// Satisfies tell a later config sync which keys it must leave alone and when a
// destination value is already good enough.
package topics

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/kmirror/kmirror/internal/mirrorspec"
)

// Config names used here. Spelled once so that a typo cannot make a managed
// key silently unmanaged.
const (
	keyCompressionType       = "compression.type"
	keyTimestampType         = "message.timestamp.type"
	keyTimestampBeforeMax    = "message.timestamp.before.max.ms"
	keyTimestampAfterMax     = "message.timestamp.after.max.ms"
	keyUncleanElection       = "unclean.leader.election.enable"
	keyMaxMessageBytes       = "max.message.bytes"
	keyCleanupPolicy         = "cleanup.policy"
	keyRetentionMs           = "retention.ms"
	keyRetentionBytes        = "retention.bytes"
	keyMinInsyncReplicas     = "min.insync.replicas"
	keyMirrorName            = "mirror.name"
	keyTimestampDifferenceMs = "message.timestamp.difference.max.ms"
)

// longMax is Java's Long.MAX_VALUE, the "no limit" value of the timestamp
// bounds.
const longMax = "9223372036854775807"

// DefaultMaxMessageBytes is Kafka's default message.max.bytes (1 MiB plus the
// record batch overhead). The destination never goes below it, so that a
// source batch that fits a default-configured source always fits the
// destination.
const DefaultMaxMessageBytes int32 = 1048588

// invariantConfigs are the destination configs the invariant needs on every
// mirror topic, whatever the source says (design-review B7, §1.5, §1.8):
//   - compression.type=producer keeps the forwarded batches as they are; any
//     other value makes the broker recompress them (offsets survive, but the
//     no-recompression path silently stops);
//   - CreateTime with unlimited before/after bounds accepts every source
//     timestamp (4.x defaults after.max.ms to one hour, which rejects
//     future-dated source records; LogAppendTime would overwrite them);
//   - unclean.leader.election.enable=false: an unclean election truncates
//     records the agent believed written, which shifts offsets.
//
// max.message.bytes is managed too, but as a lower bound (see
// DestinationConfigs).
var invariantConfigs = map[string]string{
	keyCompressionType:    "producer",
	keyTimestampType:      "CreateTime",
	keyTimestampBeforeMax: longMax,
	keyTimestampAfterMax:  longMax,
	keyUncleanElection:    "false",
}

// compactedConfigs are set, in addition, where the source cleanup.policy
// contains compact: DeleteRecords (used to align a new mirror topic whose
// source log does not start at 0) is refused with POLICY_VIOLATION unless the
// policy contains delete (design-review B5), and "delete" must then never
// delete anything by time or size, as the source only compacts.
var compactedConfigs = map[string]string{
	keyCleanupPolicy:  "compact,delete",
	keyRetentionMs:    "-1",
	keyRetentionBytes: "-1",
}

// alwaysDropped are never copied, whatever the exclude list says:
//   - mirror.name is KIP-1279's own marker and is always excluded there;
//   - message.timestamp.difference.max.ms is the pre-3.6 form of the
//     timestamp bounds: a value copied from a 3.x source would bound
//     timestamps again (and 4.x brokers no longer know the key), so the
//     invariant's before/after settings are the only timestamp bounds.
var alwaysDropped = []string{keyMirrorName, keyTimestampDifferenceMs}

// InvariantKeys returns, sorted, the destination config keys the invariant
// sets on every mirror topic, max.message.bytes included. Config sync must not
// override them. On topics whose source is compacted, cleanup.policy,
// retention.ms and retention.bytes are managed as well; Managed answers for a
// given source.
func InvariantKeys() []string {
	keys := slices.Collect(maps.Keys(invariantConfigs))
	keys = append(keys, keyMaxMessageBytes)
	slices.Sort(keys)
	return keys
}

// Managed reports whether the destination config key is set by the invariant
// for a topic whose source cleanup.policy is sourceCleanupPolicy (the
// source's effective value, "" if unknown). Config sync must leave a managed
// key to DestinationConfigs.
func Managed(key, sourceCleanupPolicy string) bool {
	if _, ok := invariantConfigs[key]; ok || key == keyMaxMessageBytes {
		return true
	}
	_, ok := compactedConfigs[key]
	return ok && isCompacted(sourceCleanupPolicy)
}

// Copied reports whether DestinationConfigs copies the source config key:
// it is neither in exclude (nil means mirrorspec.DefaultTopicConfigExclude) nor one of the keys
// never copied. Config sync follows exactly these keys, less the Managed
// ones.
func Copied(key string, exclude []string) bool {
	if exclude == nil {
		exclude = mirrorspec.DefaultTopicConfigExclude()
	}
	if slices.Contains(alwaysDropped, key) {
		return false
	}
	// The KIP's list is written with and without spaces after the
	// commas; a key with a stray space must still be excluded.
	return !slices.ContainsFunc(exclude, func(k string) bool { return strings.TrimSpace(k) == key })
}

// DestinationConfigs returns the configs a destination topic must have.
//
// source holds the source topic's non-default configs (those set on the topic
// itself). They are copied, minus exclude (nil means mirrorspec.DefaultTopicConfigExclude) and minus
// mirror.name and message.timestamp.difference.max.ms, which are never copied.
// The invariant's own configs are then applied and always win:
// compression.type=producer, message.timestamp.type=CreateTime, unlimited
// message.timestamp.before/after.max.ms, unclean.leader.election.enable=false,
// max.message.bytes at least the largest of the source's max.message.bytes,
// largestBatch and DefaultMaxMessageBytes, and, where the source
// cleanup.policy contains compact, cleanup.policy=compact,delete with
// retention.ms=-1 and retention.bytes=-1.
//
// min.insync.replicas is deliberately not set: it is in KIP-1279's exclude
// list, and a value the destination cannot meet (2 on a single-replica topic)
// makes every acks=all write fail. The destination default applies; Preflight
// and Manager.Ensure warn when it is below 2 on replicated topics, where a
// leader failover could truncate acknowledged writes (design-review §1.8).
func DestinationConfigs(source map[string]string, exclude []string, largestBatch int32) map[string]string {
	out := make(map[string]string, len(source)+len(invariantConfigs)+len(compactedConfigs)+1)
	for k, v := range source {
		if Copied(k, exclude) {
			out[k] = v
		}
	}
	maps.Copy(out, invariantConfigs)

	floor := max(largestBatch, DefaultMaxMessageBytes)
	if n, ok := parseInt32(source[keyMaxMessageBytes]); ok {
		floor = max(floor, n)
	}
	out[keyMaxMessageBytes] = strconv.FormatInt(int64(floor), 10)

	if isCompacted(source[keyCleanupPolicy]) {
		maps.Copy(out, compactedConfigs)
	}
	return out
}

// Satisfies reports whether the destination's current value have meets the
// wanted value want of key, as DestinationConfigs computed it. It differs
// from string equality where Kafka's semantics do: max.message.bytes is a
// lower bound (a destination raised further, for example for an old oversized
// batch, is never lowered), cleanup.policy is a set, and booleans and the
// timestamp type are case-insensitive.
func Satisfies(key, want, have string) bool {
	switch key {
	case keyMaxMessageBytes:
		w, okw := parseInt32(want)
		h, okh := parseInt32(have)
		return okw && okh && h >= w
	case keyCleanupPolicy:
		return slices.Equal(policySet(want), policySet(have))
	case keyUncleanElection, keyTimestampType, keyCompressionType:
		return strings.EqualFold(strings.TrimSpace(want), strings.TrimSpace(have))
	}
	return strings.TrimSpace(want) == strings.TrimSpace(have)
}

// isCompacted reports whether a cleanup.policy value contains compact.
func isCompacted(policy string) bool {
	return slices.Contains(policySet(policy), "compact")
}

// policySet splits a cleanup.policy list into its sorted, deduplicated,
// lower-case members; "[compact, delete]" style brackets from some tools are
// tolerated.
func policySet(policy string) []string {
	policy = strings.Trim(strings.TrimSpace(policy), "[]")
	var set []string
	for p := range strings.SplitSeq(policy, ",") {
		if p = strings.ToLower(strings.TrimSpace(p)); p != "" {
			set = append(set, p)
		}
	}
	slices.Sort(set)
	return slices.Compact(set)
}

// parseInt32 parses a positive int32 config value; max.message.bytes is an
// int on the broker.
func parseInt32(s string) (int32, bool) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 32)
	if err != nil || n <= 0 {
		return 0, false
	}
	return int32(n), true
}
