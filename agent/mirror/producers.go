package mirror

import (
	"context"
	"fmt"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/statestore"
)

// ownedProducers keeps, per destination partition, the producer ids the
// agent has written it with (partition.OwnedProducers) in the state topic,
// as statestore.ProducerSet records keyed by destination topic
// (statestore.ProducersKey): a mirror deleted and created again must still
// recognise the batches of the old mirror's ids, so Delete keeps them.
type ownedProducers struct {
	store Store
	log   hclog.Logger
}

// producersMu serializes the read-merge-write of producer id records: two
// partition mirrors of one destination partition may overlap briefly (a
// restart of the partition), and neither may drop the other's ids.
var producersMu sync.Mutex

func (o ownedProducers) OwnedProducers(tp fetcher.TP) []int64 {
	v, _ := o.store.Get(statestore.ProducersKey(tp.Topic, tp.Partition))
	s, err := statestore.DecodeProducerSet(v)
	if err != nil {
		// Unreadable: the ids it held are unknown, so their batches
		// count as foreign (the partition fails rather than accept
		// another writer's).
		o.log.Error("unreadable producer id record", "partition", tp.String(), "error", err)
	}
	return s.IDs
}

func (o ownedProducers) AddOwnedProducers(ctx context.Context, tp fetcher.TP, ids []int64) error {
	producersMu.Lock()
	defer producersMu.Unlock()
	key := statestore.ProducersKey(tp.Topic, tp.Partition)
	v, _ := o.store.Get(key)
	s, err := statestore.DecodeProducerSet(v)
	if err != nil {
		// Never overwrite what cannot be read: it may hold ids whose
		// batches are in the log.
		return fmt.Errorf("%s: %w", key, err)
	}
	if !s.Add(ids...) {
		return nil
	}
	return o.store.Put(ctx, key, s.Encode())
}
