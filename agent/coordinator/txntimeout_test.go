package coordinator_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/coordinator"
	"github.com/kmirror/kmirror/agent/coordinator/coordinatortest"
	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
	"github.com/kmirror/kmirror/internal/mirrorspec"
)

// TestPartitionsGetDestinationTxnTimeout checks that the coordinator opens
// every partition's destination transactional ids with the timeout the
// preflight chose, the destination's transaction.max.timeout.ms, and that
// describe says so: the destination's coordinator reports the timeout each
// id was initialized with (DescribeTransactions). A destination allowing
// less than the 15 minutes the agent used to ask for failed InitProducerId
// with INVALID_TRANSACTION_TIMEOUT at every resync; one allowing more gets
// its maximum.
func TestPartitionsGetDestinationTxnTimeout(t *testing.T) {
	for _, tc := range []struct {
		name     string
		dst, src int32 // transaction.max.timeout.ms
	}{
		{"below Kafka's default", 300000, 300000},
		{"above the source's", 1800000, 900000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := devclustertest.Start(t, devcluster.Name("src"),
				devcluster.BrokerConfigs(map[string]string{"transaction.max.timeout.ms": strconv.Itoa(int(tc.src))}),
				devcluster.KfakeOptions(kfake.SeedTopics(2, "orders")))
			dst := devclustertest.Start(t, devcluster.Name("dst"),
				devcluster.BrokerConfigs(map[string]string{"transaction.max.timeout.ms": strconv.Itoa(int(tc.dst))}))
			co := coordinatortest.Start(t, coordinator.Config{
				Destination:     []kgo.Opt{kgo.SeedBrokers(dst.Bootstrap()...)},
				RefreshInterval: 200 * time.Millisecond,
			}, mirrorspec.Spec{Name: "dr", Source: mirrorspec.Source{BootstrapServers: src.Bootstrap()}, Topics: []string{"orders"}}).Coordinator

			dcl, err := kgo.NewClient(kgo.SeedBrokers(dst.Bootstrap()...))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(dcl.Close)
			adm := kadm.NewClient(dcl)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			ids := []string{"kmirror.dr.orders.0.fill", "kmirror.dr.orders.0.abort", "kmirror.dr.orders.1.fill", "kmirror.dr.orders.1.abort"}
			want := tc.dst
			got := map[string]int32{}
			for {
				ds, err := adm.DescribeTransactions(ctx, ids...)
				if err == nil {
					for _, id := range ids {
						if d, ok := ds[id]; ok && d.Err == nil {
							got[id] = d.TimeoutMillis
						}
					}
				}
				done := len(got) == len(ids)
				for _, v := range got {
					done = done && v == want
				}
				if done {
					break
				}
				if ctx.Err() != nil {
					t.Fatalf("transaction timeouts of the agent's ids: %v, want %d on all of %v; describe: %+v", got, want, ids, co.Describe())
				}
				time.Sleep(20 * time.Millisecond)
			}

			ms := co.Describe()
			if len(ms) != 1 {
				t.Fatalf("mirrors: %+v", ms)
			}
			if ms[0].TxnTimeoutMs != int64(want) || !strings.Contains(ms[0].TxnTimeoutFrom, "destination transaction.max.timeout.ms="+strconv.Itoa(int(want))) {
				t.Errorf("describe: txn_timeout_ms=%d from %q, want %d from the destination's setting", ms[0].TxnTimeoutMs, ms[0].TxnTimeoutFrom, want)
			}
			if ms[0].Error != "" {
				t.Errorf("describe: error %q", ms[0].Error)
			}
		})
	}
}

// TestPreflightRefusesShortDestinationTxnTimeout checks that a destination
// allowing shorter transactions than the source does not get mirrored into:
// describe shows the refusal as the mirror's error, with the fix.
func TestPreflightRefusesShortDestinationTxnTimeout(t *testing.T) {
	src := devclustertest.Start(t, devcluster.Name("src"), devcluster.KfakeOptions(kfake.SeedTopics(1, "orders")))
	dst := devclustertest.Start(t, devcluster.Name("dst"),
		devcluster.BrokerConfigs(map[string]string{"transaction.max.timeout.ms": "60000"}))
	co := coordinatortest.Start(t, coordinator.Config{
		Destination:     []kgo.Opt{kgo.SeedBrokers(dst.Bootstrap()...)},
		RefreshInterval: 200 * time.Millisecond,
	}, mirrorspec.Spec{Name: "dr", Source: mirrorspec.Source{BootstrapServers: src.Bootstrap()}, Topics: []string{"orders"}}).Coordinator

	deadline := time.Now().Add(30 * time.Second)
	for {
		ms := co.Describe()
		if len(ms) == 1 && strings.Contains(ms[0].Error, "preflight refused: REFUSE destination transaction.max.timeout.ms=60000") {
			if !strings.Contains(ms[0].Error, "transaction.max.timeout.ms=1800000") || len(ms[0].Topics) != 1 || len(ms[0].Topics[0].Partitions) != 0 {
				t.Errorf("describe: %+v, want the server.properties line and no partition running", ms[0])
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("describe: %+v, want the mirror refused by the preflight", ms)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
