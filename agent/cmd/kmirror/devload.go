package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
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
	clientLog := fs.String("client-log-level", "warn", "the Kafka client's log level on stderr: none, error, warn, info or debug")
	progress := fs.Duration("progress", 10*time.Second, "print the records acknowledged so far at this interval (0 = only at the end)")
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
	logLevel, ok := map[string]kgo.LogLevel{"none": kgo.LogLevelNone, "error": kgo.LogLevelError,
		"warn": kgo.LogLevelWarn, "info": kgo.LogLevelInfo, "debug": kgo.LogLevelDebug}[*clientLog]
	if !ok {
		return fmt.Errorf("--client-log-level %q: use none, error, warn, info or debug", *clientLog)
	}
	var configs map[string]*string
	if *compacted {
		configs = map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}
		if *keys == 0 {
			*keys = 100
		}
	}
	// The client's warnings go to stderr: a producer that cannot make
	// progress (no producer id, no leader) says why instead of going quiet.
	opts := []kgo.Opt{kgo.SeedBrokers(strings.Split(*bootstrap, ",")...),
		kgo.WithLogger(kgo.BasicLogger(os.Stderr, logLevel, nil))}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("--bootstrap: %w", err)
	}
	// A cluster that has just started may need a while before every
	// broker knows the new topic: bounded, so that an unreachable cluster
	// fails instead of waiting forever.
	createCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	parts, err := workload.CreateTopic(createCtx, cl, *topic, int32(*partitions), configs)
	cancel()
	cl.Close()
	if err != nil {
		return err
	}
	if parts < int32(*partitions) {
		fmt.Fprintf(os.Stderr, "topic %s exists with %d partitions: producing to those (--partitions %d)\n", *topic, parts, *partitions)
		*partitions = int(parts)
	}
	spec := workload.Spec{Topic: *topic, Partitions: int32(*partitions), Records: *records, ValueSize: *valueSize,
		Keys: *keys, Codecs: strings.Split(*codecs, ","), Headers: true, TransactionalID: *txnID, AbortEvery: *abortEvery}
	p := workload.NewProducer(opts, spec, *rate)
	done := make(chan struct{})
	defer func() { <-done }()
	reportCtx, stopReport := context.WithCancel(ctx)
	defer stopReport()
	go func() {
		defer close(done)
		reportProgress(reportCtx, p, *topic, *progress)
	}()
	st, err := p.Run(ctx)
	stopReport()
	if err != nil {
		return err
	}
	fmt.Printf("produced %d records to %s\n", st.Records, *topic)
	return nil
}

// reportProgress prints "first records acknowledged" once the first chunk
// lands (the demo waits for it), then the running total at every interval.
func reportProgress(ctx context.Context, p *workload.Producer, topic string, every time.Duration) {
	if err := p.WaitAcked(ctx, 1); err != nil {
		return
	}
	fmt.Printf("first records acknowledged on %s\n", topic)
	if every <= 0 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			var total int64
			for _, n := range p.Acked() {
				total += n
			}
			fmt.Printf("%d records acknowledged on %s\n", total, topic)
		}
	}
}
