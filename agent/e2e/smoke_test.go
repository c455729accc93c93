package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/coordinator"
	"github.com/kmirror/kmirror/internal/devcluster"
)

func TestSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	src := devcluster.StartT(t, devcluster.Name("src"), devcluster.Brokers(3), devcluster.KfakeOptions(kfake.SeedTopics(3, "orders")))
	dst := devcluster.StartT(t, devcluster.Name("dst"))
	p, _ := kgo.NewClient(kgo.SeedBrokers(src.Bootstrap()...), kgo.ProducerBatchCompression(kgo.ZstdCompression()))
	defer p.Close()
	for i := 0; i < 30000; i++ {
		p.Produce(ctx, &kgo.Record{Topic: "orders", Key: []byte(fmt.Sprint(i % 100)), Value: []byte(fmt.Sprintf("value-%d", i))}, nil)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	co, err := coordinator.New(ctx, coordinator.Config{
		Destination: []kgo.Opt{kgo.SeedBrokers(dst.Bootstrap()...)},
		Logger:      hclog.New(&hclog.LoggerOptions{Level: hclog.Debug}),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	if err := co.Apply(ctx, coordinator.MirrorSpec{Name: "dr", Source: coordinator.Source{BootstrapServers: src.Bootstrap()}, Topics: []string{"orders"}}); err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = co.Run(rctx); close(done) }()
	defer func() { rcancel(); <-done }()

	sa := kadm.NewClient(p)
	dc, _ := kgo.NewClient(kgo.SeedBrokers(dst.Bootstrap()...))
	defer dc.Close()
	da := kadm.NewClient(dc)
	for {
		se, _ := sa.ListEndOffsets(ctx, "orders")
		de, err := da.ListEndOffsets(ctx, "orders")
		same := err == nil
		se.Each(func(o kadm.ListedOffset) {
			d, ok := de.Lookup(o.Topic, o.Partition)
			if !ok || d.Offset != o.Offset {
				same = false
			}
		})
		if same {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("not caught up: %+v", co.Describe())
		case <-time.After(200 * time.Millisecond):
		}
	}
	t.Logf("%+v", co.Describe())
}
