package coordinator

import (
	"context"
	"encoding/json"

	"github.com/kmirror/kmirror/agent/mirror"
)

// RunningProducer is the producer mirror name runs with here; ok is false
// when it does not run here.
func (c *Coordinator) RunningProducer(name string) (id int64, epoch int16, ok bool) {
	m := c.running(name)
	if m == nil {
		return 0, 0, false
	}
	id, epoch = m.Producer()
	return id, epoch, true
}

// RecreateRecord writes mirror name's record again with a producer of its
// own, as an agent that created the mirror at the same time would have.
func (c *Coordinator) RecreateRecord(ctx context.Context, name string) (id int64, epoch int16, err error) {
	var rec mirror.Record
	v, _ := c.store.Get(mirrorKey(name))
	if err := json.Unmarshal(v, &rec); err != nil {
		return 0, 0, err
	}
	if rec.ProducerID, rec.Epoch, err = c.writer.InitProducerID(ctx); err != nil {
		return 0, 0, err
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return 0, 0, err
	}
	return rec.ProducerID, rec.Epoch, c.store.Put(ctx, mirrorKey(name), b)
}
