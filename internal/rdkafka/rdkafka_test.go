package rdkafka

import (
	"context"
	"os"
	"testing"

	"github.com/kmirror/kmirror/internal/clientop"
	"github.com/kmirror/kmirror/internal/clientop/clientoptest"
)

// brokers are this package's Kafka brokers, started on first use (TODO:
// replace with devcluster's kafka engine).
var brokers clientoptest.Brokers

func TestMain(m *testing.M) {
	code := m.Run()
	brokers.StopAll()
	os.Exit(code)
}

func run(ctx context.Context, op clientop.Op) (clientop.Result, error) { return Run(ctx, op) }

// TestKafka4 runs librdkafka against a 4.4.0 broker.
func TestKafka4(t *testing.T) {
	b := brokers.Get(t, "4.4.0")
	t.Run("transactions", func(t *testing.T) { clientoptest.Transactions(t, run, b, "zstd") })
	t.Run("produce", func(t *testing.T) { clientoptest.Produce(t, run, b) })
	t.Run("sasl", func(t *testing.T) { clientoptest.SASL(t, run, b) })
}

func TestUsageError(t *testing.T) {
	_, err := Run(context.Background(), clientop.Produce{Topic: "t", Records: 1})
	if err == nil {
		t.Fatal("produce without --bootstrap succeeded")
	}
	t.Log(err)
}
