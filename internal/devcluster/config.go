package devcluster

import (
	"math"
	"strconv"
	"strings"
)

// Kafka's defaults for the topic configs the strict checks read. Where kfake
// reports a different default through DescribeConfigs we follow kfake, so
// that what a client reads from this cluster and what it enforces agree.
const (
	defaultMaxMessageBytes = 1048588 // Kafka's and kfake's message.max.bytes
	// defaultTimestampAfterMaxMs is Kafka 4.x's
	// message.timestamp.after.max.ms; 3.x had Long.MAX. Imitating the newer
	// broker catches agents that forget to raise it on the destination.
	defaultTimestampAfterMaxMs  = 3600000
	defaultTimestampBeforeMaxMs = math.MaxInt64
	// defaultSegmentBytes is kfake's log.segment.bytes (Kafka's is 1 GiB).
	defaultSegmentBytes = 100 << 20
)

// topicRules is what the strict checks need to know about one topic.
type topicRules struct {
	compact         bool // cleanup.policy contains compact: keyless records are refused
	delete          bool // cleanup.policy contains delete: DeleteRecords is allowed
	maxMessageBytes int64
	logAppendTime   bool // message.timestamp.type=LogAppendTime
	beforeMaxMs     int64
	afterMaxMs      int64
	segmentBytes    int64
}

// resolveTopicRules applies Kafka's precedence: a topic override wins over
// the broker-level default, which wins over the built-in default. topic is
// the cluster's live view of the topic's overrides (a nil value means the
// override was removed); broker holds broker-level defaults.
//
// Values kfake accepted but Kafka would have refused (kfake validates no
// topic config) fall back to the next level rather than failing produce.
func resolveTopicRules(topic map[string]*string, broker map[string]string) topicRules {
	lookup := func(topicKey, brokerKey string) (string, bool) {
		if v, ok := topic[topicKey]; ok && v != nil {
			return *v, true
		}
		v, ok := broker[brokerKey]
		return v, ok
	}
	num := func(topicKey, brokerKey string, def int64) int64 {
		if v, ok := topic[topicKey]; ok && v != nil {
			if n, err := strconv.ParseInt(strings.TrimSpace(*v), 10, 64); err == nil {
				return n
			}
		}
		if v, ok := broker[brokerKey]; ok {
			if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
				return n
			}
		}
		return def
	}

	r := topicRules{
		maxMessageBytes: num("max.message.bytes", "message.max.bytes", defaultMaxMessageBytes),
		beforeMaxMs:     num("message.timestamp.before.max.ms", "log.message.timestamp.before.max.ms", defaultTimestampBeforeMaxMs),
		afterMaxMs:      num("message.timestamp.after.max.ms", "log.message.timestamp.after.max.ms", defaultTimestampAfterMaxMs),
		segmentBytes:    num("segment.bytes", "log.segment.bytes", defaultSegmentBytes),
	}

	policy, ok := lookup("cleanup.policy", "log.cleanup.policy")
	if !ok {
		policy = "delete"
	}
	for _, p := range strings.Split(policy, ",") {
		switch strings.TrimSpace(strings.ToLower(p)) {
		case "compact":
			r.compact = true
		case "delete":
			r.delete = true
		}
	}

	if tt, ok := lookup("message.timestamp.type", "log.message.timestamp.type"); ok {
		r.logAppendTime = strings.EqualFold(strings.TrimSpace(tt), "LogAppendTime")
	}
	return r
}
