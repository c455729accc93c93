// Package statestore persists the agent's intent and per-partition state in a
// compacted topic on the destination cluster, so that a restarted or new agent
// rebuilds its memory from the cluster it writes to and nothing else.
//
// Keys are strings ("mirror/NAME", "partition/MIRROR/TOPIC/N", ...), values
// are opaque bytes (JSON written by the coordinator). A nil value deletes the
// key (a tombstone the cleaner removes later). The producer id records
// (producers/TOPIC/N, producers.go) are defined here, as they outlive a
// mirror.
package statestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/writegate"
)

// DefaultTopic is the state topic's name unless the agent's config says otherwise.
const DefaultTopic = "__kmirror_state"

// Store is the agent's view of the state topic: a map that is written through
// to the topic before it changes in memory.
type Store struct {
	cl    *kgo.Client
	opts  []kgo.Opt
	topic string

	mu     sync.Mutex
	values map[string][]byte
	// offsets holds, by key, the offset of the record its value came
	// from: a record read back (Follow) older than what Put wrote since
	// changes nothing.
	offsets map[string]int64
	// next is the offset after the last record read or written; Follow
	// reads on from it.
	next int64
	// changed is closed, and replaced, when Follow applies another
	// agent's record.
	changed chan struct{}
	// moved is closed, and replaced, whenever next moves.
	moved chan struct{}
}

// Open creates the state topic when it is missing (one partition, compacted,
// so that ordering per key is total and reads are cheap), reads it to its end
// and returns the store holding the latest value of every key.
//
// opts connect to the destination cluster (seed brokers, TLS, SASL); the
// store owns the clients it makes from them until Close.
func Open(ctx context.Context, opts []kgo.Opt, topic string) (*Store, error) {
	if topic == "" {
		topic = DefaultTopic
	}
	cl, err := kgo.NewClient(append(opts[:len(opts):len(opts)],
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.AllISRAcks()),
	)...)
	if err != nil {
		return nil, fmt.Errorf("connecting to the destination for state topic %q: %w", topic, err)
	}
	if err := ensureTopic(ctx, cl, topic); err != nil {
		cl.Close()
		return nil, err
	}
	st, err := readState(ctx, cl, opts, topic)
	if err != nil {
		cl.Close()
		return nil, err
	}
	return &Store{cl: cl, opts: opts, topic: topic, values: st.values, offsets: st.offsets, next: st.next,
		changed: make(chan struct{}), moved: make(chan struct{})}, nil
}

// Close releases the store's connections.
func (s *Store) Close() { s.cl.Close() }

// EnsureTopic creates the state topic when it is missing, as Open does; the
// writer lease (agent/lease) follows the topic before a store is opened.
func EnsureTopic(ctx context.Context, opts []kgo.Opt, topic string) error {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("connecting to the destination for state topic %q: %w", topic, err)
	}
	defer cl.Close()
	return ensureTopic(ctx, cl, topic)
}

func ensureTopic(ctx context.Context, cl *kgo.Client, topic string) error {
	adm := kadm.NewClient(cl)
	retention := "-1"
	resp, err := adm.CreateTopic(ctx, 1, -1, map[string]*string{
		"cleanup.policy": kadm.StringPtr("compact"),
		"retention.ms":   &retention,
	}, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("creating state topic %q on the destination: %w", topic, err)
	}
	// A Kafka broker answers CreateTopics before the new topic is in
	// the metadata it serves: wait until partition 0 has a leader that
	// answers ListOffsets, so that the reads that follow find it.
	for {
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err == nil {
			end, ok := ends.Lookup(topic, 0)
			switch {
			case ok && end.Err == nil:
				return nil
			case ok:
				err = end.Err
			case ends.Error() != nil:
				err = ends.Error()
			default:
				err = kerr.UnknownTopicOrPartition
			}
			if !kerr.IsRetriable(err) {
				return fmt.Errorf("reading the end of state topic %q: %w", topic, err)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for state topic %q on the destination: %w (%w)", topic, err, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// state is the state topic read to its end.
type state struct {
	values  map[string][]byte
	offsets map[string]int64 // of each key's latest record
	next    int64            // the end read to
}

func readAll(ctx context.Context, cl *kgo.Client, opts []kgo.Opt, topic string) (map[string][]byte, error) {
	st, err := readState(ctx, cl, opts, topic)
	return st.values, err
}

func readState(ctx context.Context, cl *kgo.Client, opts []kgo.Opt, topic string) (state, error) {
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return state{}, fmt.Errorf("reading the end of state topic %q: %w", topic, err)
	}
	end, ok := ends.Lookup(topic, 0)
	if !ok || end.Err != nil {
		return state{}, fmt.Errorf("reading the end of state topic %q: %v", topic, end.Err)
	}
	st := state{values: map[string][]byte{}, offsets: map[string]int64{}, next: end.Offset}
	if end.Offset == 0 {
		return st, nil
	}
	// A consumer of its own: consuming options cannot be added to a client later.
	rd, err := kgo.NewClient(append(opts[:len(opts):len(opts)],
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
	)...)
	if err != nil {
		return state{}, fmt.Errorf("reading state topic %q: %w", topic, err)
	}
	defer rd.Close()
	for {
		fs := rd.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return state{}, fmt.Errorf("reading state topic %q: %w", topic, err)
		}
		var done bool
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return state{}, fmt.Errorf("reading state topic %q: %w", topic, ferr)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Value == nil {
				delete(st.values, string(r.Key))
			} else {
				st.values[string(r.Key)] = r.Value
			}
			st.offsets[string(r.Key)] = r.Offset
			if r.Offset >= end.Offset-1 {
				done = true
			}
		})
		if done {
			return st, nil
		}
	}
}

// Follow reads what other agents write to the state topic, from where Open
// read to, until ctx ends: agents that share a destination learn each
// other's mirrors and the state of a mirror they take over. Changed tells
// when it applied a record; Sync waits until it has read what is written.
// Read errors are retried; it returns ctx's error.
func (s *Store) Follow(ctx context.Context) error {
	s.mu.Lock()
	from := s.next
	s.mu.Unlock()
	rd, err := kgo.NewClient(append(s.opts[:len(s.opts):len(s.opts)],
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{s.topic: {0: kgo.NewOffset().At(from)}}),
		kgo.FetchMaxWait(250*time.Millisecond),
	)...)
	if err != nil {
		return fmt.Errorf("following state topic %q: %w", s.topic, err)
	}
	defer rd.Close()
	for {
		fs := rd.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		// Errors are the client's to retry (a leader moving, the
		// broker restarting); the records that came are applied.
		fs.EachRecord(s.apply)
	}
}

// apply takes one record read back from the topic.
func (s *Store) apply(r *kgo.Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := string(r.Key)
	if last, ok := s.offsets[key]; !ok || r.Offset > last {
		old, had := s.values[key]
		if r.Value == nil {
			delete(s.values, key)
		} else {
			s.values[key] = r.Value
		}
		s.offsets[key] = r.Offset
		if had != (r.Value != nil) || !bytes.Equal(old, r.Value) {
			close(s.changed)
			s.changed = make(chan struct{})
		}
	}
	s.advanceLocked(r.Offset + 1)
}

func (s *Store) advanceLocked(next int64) {
	if next > s.next {
		s.next = next
		close(s.moved)
		s.moved = make(chan struct{})
	}
}

// Changed returns a channel closed when Follow next applies a record that
// changes a value.
func (s *Store) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// Sync waits until the store holds every record written to the topic
// before it was called: call it, with Follow running, before acting on
// state another agent wrote last.
func (s *Store) Sync(ctx context.Context) error {
	ends, err := kadm.NewClient(s.cl).ListEndOffsets(ctx, s.topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Errorf("reading the end of state topic %q: %w", s.topic, err)
	}
	end, _ := ends.Lookup(s.topic, 0)
	for {
		s.mu.Lock()
		next, moved := s.next, s.moved
		s.mu.Unlock()
		if next >= end.Offset {
			return nil
		}
		select {
		case <-moved:
		case <-ctx.Done():
			return fmt.Errorf("reading state topic %q to offset %d (at %d): %w", s.topic, end.Offset, next, ctx.Err())
		}
	}
}

// Get returns the value of key and whether it exists.
func (s *Store) Get(key string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.values[key]
	return v, ok
}

// Keys returns the keys that start with prefix, sorted.
func (s *Store) Keys(prefix string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k := range s.values {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// All returns a copy of every key and value.
func (s *Store) All() map[string][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.values)
}

// Put writes key=value to the state topic (acks=all) and then to memory; a
// nil value deletes the key.
func (s *Store) Put(ctx context.Context, key string, value []byte) error {
	if err := writegate.Check(ctx); err != nil {
		return fmt.Errorf("writing %q to state topic %q: %w", key, s.topic, err)
	}
	r := &kgo.Record{Topic: s.topic, Partition: 0, Key: []byte(key), Value: value}
	if err := s.cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		return fmt.Errorf("writing %q to state topic %q: %w", key, s.topic, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if last, ok := s.offsets[key]; ok && last > r.Offset {
		return nil // Follow applied a later write of another agent
	}
	if value == nil {
		delete(s.values, key)
	} else {
		s.values[key] = value
	}
	s.offsets[key] = r.Offset
	return nil
}

// Topic returns the state topic's name.
func (s *Store) Topic() string { return s.topic }
