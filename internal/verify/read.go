package verify

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ReadRecords calls fn with every record of topic's partition in [from, to)
// that a consumer at iso sees, in offset order, and returns how many it
// read. Invisible offsets (transaction markers, aborted records at
// read_committed, compaction holes) are skipped; to must not be above the
// partition's high watermark (its last stable offset at read_committed), or
// ReadRecords fails once it reaches the log end. It reads with raw fetches,
// as Compare does, so that a range ending in invisible offsets ends.
func ReadRecords(ctx context.Context, cl *kgo.Client, topic string, partition int32, from, to int64, iso Isolation, fn func(*kgo.Record) error) (int64, error) {
	if from >= to {
		return 0, nil
	}
	s, err := loadSide(ctx, cl, Source, topic)
	if err != nil {
		return 0, err
	}
	pi, ok := s.parts[partition]
	if !ok {
		return 0, fmt.Errorf("verify: %s has no partition %d", topic, partition)
	}
	if end := pi.offsets.End(iso); to > end {
		return 0, fmt.Errorf("verify: %s[%d]: reading up to %d, but the log ends at %d (%s)", topic, partition, to, end, iso.endName())
	}
	r := newPartitionReader(cl, Source, topic, s.topicID, partition, pi.leader, iso, max(from, pi.offsets.LogStart), to)
	var n int64
	for {
		rec, err := r.peek(ctx, 0)
		if err != nil {
			return n, err
		}
		if rec == nil {
			return n, nil
		}
		if err := fn(rec); err != nil {
			return n, err
		}
		r.pop()
		n++
	}
}
