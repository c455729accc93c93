// Package clientoptest holds what the tests of the clientop clients
// (packages javaclient and rdkafka) share: a real Apache Kafka broker to run
// them against, and the checks every client must pass.
package clientoptest

import (
	"sync"
	"testing"
	"time"

	"github.com/kmirror/kmirror/internal/devcluster"
)

// The SASL PLAIN user the broker's SASL listener knows.
const (
	SASLUser     = "kmirror-client"
	SASLPassword = "kmirror-client-secret"
)

// Broker is a single-node Apache Kafka cluster (the dev cluster's Kafka
// engine) with a PLAINTEXT listener, and a second one whose listener takes
// SASL PLAIN.
type Broker struct {
	// Version is the Kafka release it runs.
	Version string
	// Bootstrap is the PLAINTEXT cluster's listener.
	Bootstrap string
	// SASLBootstrap is the SASL_PLAINTEXT cluster's listener (PLAIN, user
	// SASLUser with SASLPassword; no authorizer).
	SASLBootstrap string

	plain, sasl *devcluster.Cluster
}

// StartBroker starts both clusters of Kafka release version.
func StartBroker(version string) (*Broker, error) {
	b := &Broker{Version: version}
	var err error
	if b.plain, err = devcluster.Start(devcluster.Engine(devcluster.Kafka), devcluster.KafkaVersion(version), devcluster.Name("clients")); err != nil {
		return nil, err
	}
	if b.sasl, err = devcluster.Start(devcluster.Engine(devcluster.Kafka), devcluster.KafkaVersion(version), devcluster.Name("clients-sasl"),
		devcluster.SASLUser(SASLUser, SASLPassword)); err != nil {
		b.plain.Close()
		return nil, err
	}
	b.Bootstrap, b.SASLBootstrap = b.plain.BootstrapString(), b.sasl.BootstrapString()
	return b, nil
}

// LogTail returns the end of the brokers' logs.
func (b *Broker) LogTail() string { return b.plain.BrokerLog(1) + "\n" + b.sasl.BrokerLog(1) }

// Stop stops both clusters and removes their directories.
func (b *Broker) Stop() {
	b.plain.Close()
	b.sasl.Close()
}

// Brokers starts brokers on demand, one per Kafka release, shared by the
// tests of one package; its zero value is ready, and TestMain calls StopAll
// after the tests.
type Brokers struct {
	mu sync.Mutex
	m  map[string]*brokerOnce
}

type brokerOnce struct {
	once sync.Once
	b    *Broker
	err  error
}

// Get returns the package's broker of Kafka release version, starting it on
// first use; it fails t if the broker cannot start.
func (bs *Brokers) Get(t testing.TB, version string) *Broker {
	t.Helper()
	bs.mu.Lock()
	if bs.m == nil {
		bs.m = map[string]*brokerOnce{}
	}
	o := bs.m[version]
	if o == nil {
		o = &brokerOnce{}
		bs.m[version] = o
	}
	bs.mu.Unlock()
	o.once.Do(func() {
		start := time.Now()
		o.b, o.err = StartBroker(version)
		if o.err == nil {
			t.Logf("Kafka %s broker at %s (SASL at %s) ready in %v", version, o.b.Bootstrap, o.b.SASLBootstrap, time.Since(start).Round(time.Millisecond))
		}
	})
	if o.err != nil {
		t.Fatalf("starting a Kafka %s broker: %v", version, o.err)
	}
	return o.b
}

// StopAll stops every broker started.
func (bs *Brokers) StopAll() {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	for _, o := range bs.m {
		if o.b != nil {
			o.b.Stop()
		}
	}
}
