package javaclient

import (
	"context"
	"os"
	"testing"

	"github.com/kmirror/kmirror/internal/clientop"
	"github.com/kmirror/kmirror/internal/clientop/clientoptest"
)

// brokers are this package's Kafka brokers, one per release, started on
// first use (TODO: replace with devcluster's kafka engine).
var brokers clientoptest.Brokers

func TestMain(m *testing.M) {
	code := m.Run()
	brokers.StopAll()
	os.Exit(code)
}

func runner(c Client) clientoptest.Runner {
	return func(ctx context.Context, op clientop.Op) (clientop.Result, error) { return c.Run(ctx, op) }
}

// TestKafka4 runs the 4.4.0 Java client against a 4.4.0 broker.
func TestKafka4(t *testing.T) {
	b := brokers.Get(t, DefaultKafkaVersion)
	run := runner(Client{})
	t.Run("transactions", func(t *testing.T) { clientoptest.Transactions(t, run, b, "zstd") })
	t.Run("produce", func(t *testing.T) { clientoptest.Produce(t, run, b) })
	t.Run("sasl", func(t *testing.T) { clientoptest.SASL(t, run, b) })
}

// TestKafka3 runs the 3.9.2 Java client against a 3.9.2 broker.
func TestKafka3(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a second broker")
	}
	b := brokers.Get(t, "3.9.2")
	run := runner(Client{KafkaVersion: "3.9.2"})
	t.Run("transactions", func(t *testing.T) { clientoptest.Transactions(t, run, b, "lz4") })
}

func TestClientsVersion(t *testing.T) {
	libs, err := Client{KafkaVersion: "3.9.2"}.Libs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if v, err := ClientsVersion(libs); err != nil || v != "3.9.2" {
		t.Fatalf("ClientsVersion(%s) = %q, %v; want 3.9.2", libs, v, err)
	}
}

func TestUsageError(t *testing.T) {
	_, err := Run(context.Background(), clientop.Produce{Topic: "t", Records: 1})
	if err == nil {
		t.Fatal("produce without --bootstrap succeeded")
	}
	t.Log(err)
}
