package statestore

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
)

// ProducersKind is the kind of the keys of ProducerSet records.
const ProducersKind = "producers"

// ProducersKey is the key of the producer ids the agent has written
// destination partition topic/partition with: producers/TOPIC/N. It is keyed
// by the destination topic, not by mirror: the record describes who wrote
// the destination log, which outlives a mirror deleted and created again
// (its new plain producer id must not make the old one's batches foreign).
// Deleting a mirror keeps these records.
func ProducersKey(topic string, partition int32) string {
	return ProducersKind + "/" + topic + "/" + strconv.FormatInt(int64(partition), 10)
}

// ProducerSetVersion is the version of the ProducerSet records this agent
// writes. Later versions may add fields; a reader keeps the ids of any
// version and ignores what it does not know.
const ProducerSetVersion = 1

// ProducerSet is every producer id the agent has owned for one destination
// partition: the plain idempotent writer's, and each producer id
// InitProducerId gave its abort and filler transactional ids (a new one
// after epoch exhaustion or transactional.id.expiration.ms). It only grows:
// producer ids are never allocated twice by a cluster, and an id dropped
// would make the agent's own batches still in the log a foreign write. They
// are few (one per mirror creation and per id change), so all are kept.
//
// Encoded as JSON: {"version":1,"producer_ids":[ascending ids]}.
type ProducerSet struct {
	Version int     `json:"version"`
	IDs     []int64 `json:"producer_ids"`
}

// DecodeProducerSet reads a ProducerSet record; a missing record (nil, from
// a state topic written before these records existed) is the empty set.
func DecodeProducerSet(b []byte) (ProducerSet, error) {
	var s ProducerSet
	if len(b) == 0 {
		return s, nil
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return ProducerSet{}, fmt.Errorf("reading a producer id record: %w", err)
	}
	ids := s.IDs
	s.IDs = nil
	s.Add(ids...)
	return s, nil
}

// Encode writes the record at ProducerSetVersion (or at the version it was
// read at, when later).
func (s ProducerSet) Encode() []byte {
	s.Version = max(s.Version, ProducerSetVersion)
	if s.IDs == nil {
		s.IDs = []int64{}
	}
	b, err := json.Marshal(s)
	if err != nil {
		panic(err) // ints only
	}
	return b
}

// Has says whether id is in the set.
func (s ProducerSet) Has(id int64) bool {
	_, ok := slices.BinarySearch(s.IDs, id)
	return ok
}

// Add adds ids (negative ones, which no broker allocates, are skipped) and
// says whether the set changed.
func (s *ProducerSet) Add(ids ...int64) bool {
	changed := false
	for _, id := range ids {
		if id < 0 {
			continue
		}
		if i, ok := slices.BinarySearch(s.IDs, id); !ok {
			s.IDs = slices.Insert(s.IDs, i, id)
			changed = true
		}
	}
	return changed
}
