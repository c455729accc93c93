package lease

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The kinds of lease records.
const (
	KindClaim   = "claim"
	KindRenew   = "renew"
	KindRelease = "release"
)

// Imitate writes one lease record to the state topic as an agent of an
// earlier release wrote it (agent doubles as its process's instance id).
// Tests use it to stand for a lease agent where running one is not the
// point: the end-to-end tests run a real one.
func Imitate(ctx context.Context, dst []kgo.Opt, topic, kind, agent string, epoch int64, duration time.Duration) error {
	r := record{Kind: kind, Agent: agent, Instance: agent, Epoch: epoch, DurationMs: duration.Milliseconds()}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append(dst[:len(dst):len(dst)], kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(r.key()), Value: b}).FirstErr(); err != nil {
		return fmt.Errorf("writing a lease record (%s of epoch %d): %w", kind, epoch, err)
	}
	return nil
}
