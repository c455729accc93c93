package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/internal/workload"
)

func init() {
	register("dev-load", "produce a deterministic test workload to a topic (for demos and tests)", runDevLoad)
}

func runDevLoad(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("kmirror dev-load", flag.ContinueOnError)
	bootstrap := fs.String("bootstrap", "", "cluster HOST:PORT,... to produce to (required)")
	topic := fs.String("topic", "", "topic to produce to; created when missing (required)")
	partitions := fs.Int("partitions", 3, "partitions of the topic when it is created")
	rate := fs.Int("rate", 1000, "records per second (0 = as fast as possible)")
	records := fs.Int("records", 0, "stop after this many records (0 = until interrupted)")
	codecs := fs.String("codecs", "none,gzip,snappy,lz4,zstd", "compression codecs to rotate through")
	valueSize := fs.Int("value-size", 0, "value size in bytes (0 = default)")
	keys := fs.Int("keys", 0, "distinct keys (0 = a key per record; 100 with --compacted)")
	compacted := fs.Bool("compacted", false, "create the topic with cleanup.policy=compact (records keyed from --keys distinct keys)")
	txnID := fs.String("transactional-id", "", "produce in transactions of the producer ID-CODEC, one per chunk of records")
	abortEvery := fs.Int("abort-every", 0, "with --transactional-id, abort every Nth transaction (0 = commit all)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *bootstrap == "" || *topic == "" {
		return errors.New("--bootstrap and --topic are required")
	}
	if *partitions < 1 {
		return fmt.Errorf("--partitions %d: use at least 1", *partitions)
	}
	if *abortEvery < 0 || (*abortEvery > 0 && *txnID == "") {
		return fmt.Errorf("--abort-every %d: give a positive number together with --transactional-id", *abortEvery)
	}
	var configs map[string]*string
	if *compacted {
		configs = map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}
		if *keys == 0 {
			*keys = 100
		}
	}
	opts := []kgo.Opt{kgo.SeedBrokers(strings.Split(*bootstrap, ",")...)}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("--bootstrap: %w", err)
	}
	// A cluster that just started may not have every broker registered
	// with its controller yet (INVALID_REPLICATION_FACTOR for the default
	// replication factor) or answer NOT_CONTROLLER and the like: retried
	// for a while, as a producer would.
	var resp kadm.CreateTopicResponse
	for deadline := time.Now().Add(30 * time.Second); ; {
		resp, err = kadm.NewClient(cl).CreateTopic(ctx, int32(*partitions), -1, configs, *topic)
		if err == nil {
			err = resp.Err
		}
		transient := kerr.IsRetriable(err) || errors.Is(err, kerr.InvalidReplicationFactor)
		if !transient || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	cl.Close()
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("creating topic %q: %w", *topic, err)
	}
	spec := workload.Spec{Topic: *topic, Partitions: int32(*partitions), Records: *records, ValueSize: *valueSize,
		Keys: *keys, Codecs: strings.Split(*codecs, ","), Headers: true, TransactionalID: *txnID, AbortEvery: *abortEvery}
	st, err := workload.NewProducer(opts, spec, *rate).Run(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("produced %d records to %s\n", st.Records, *topic)
	return nil
}
