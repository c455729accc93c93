package partition

import (
	"context"
	"fmt"
	"slices"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/internal/recordbatch"
)

// OwnedProducers persists, per destination partition, every producer id the
// agent has written it with. A writer's producer id changes under the
// agent: InitProducerId gives a transactional id a new one when its epoch
// runs out (32,767 calls) or after transactional.id.expiration.ms, and a
// mirror deleted and created again has a new plain writer. The batches of
// the old ids stay in the destination log, and a resync must tell them from
// a foreign write: the foreign-write check accepts exactly the ids recorded
// here (and the ones the writers hold now).
type OwnedProducers interface {
	// OwnedProducers returns the ids recorded for tp.
	OwnedProducers(tp fetcher.TP) []int64
	// AddOwnedProducers records ids for tp, keeping those recorded
	// already; it returns once the record is persisted.
	AddOwnedProducers(ctx context.Context, tp fetcher.TP, ids []int64) error
}

// loadOwned merges the persisted producer ids of the partition into memory.
func (m *Mirror) loadOwned() {
	if m.owned == nil {
		m.owned = map[int64]bool{}
	}
	if m.cfg.Producers == nil {
		return
	}
	for _, id := range m.cfg.Producers.OwnedProducers(m.cfg.TP) {
		m.owned[id] = true
	}
}

// own records producer ids as the partition's, in the state topic first:
// call it before the first write with an id the partition has just learned.
func (m *Mirror) own(ctx context.Context, ids ...int64) error {
	if m.owned == nil {
		m.owned = map[int64]bool{}
	}
	var add []int64
	for _, id := range ids {
		if id >= 0 && !m.owned[id] && !slices.Contains(add, id) {
			add = append(add, id)
		}
	}
	if len(add) == 0 {
		return nil
	}
	if m.cfg.Producers != nil {
		if err := m.cfg.Producers.AddOwnedProducers(ctx, m.cfg.TP, add); err != nil {
			return fmt.Errorf("recording producer ids %v of the partition in the state topic: %w", add, err)
		}
	}
	for _, id := range add {
		m.owned[id] = true
	}
	m.log.Info("producer ids recorded as the partition's", "producer_ids", add)
	return nil
}

// ownBatch says whether destination batch h is the agent's: a batch of the
// plain writer (plain) or of the transactional id of aborted source records
// (data), a marker of the filler id (fill; -1 with FillMarkers) or of
// FillMarkers, or a batch of a producer id the agent held before for this
// partition (owned, from the state topic). Anything else is a foreign
// write, as is a data batch of the filler id, which writes markers only.
func ownBatch(h recordbatch.Header, plain, data, fill int64, owned map[int64]bool) bool {
	switch {
	case h.ProducerID < 0:
		return false
	case h.ProducerID == plain, h.ProducerID == data:
		return true
	case h.ProducerID == fill, h.ProducerID == markerPID:
		return h.IsControl()
	}
	return owned[h.ProducerID]
}
