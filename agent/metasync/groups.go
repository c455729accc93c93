package metasync

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kmirror/kmirror/internal/mirrorspec"
)

// GroupSource is what group sync reads of the source cluster (a
// *kadm.Client).
type GroupSource interface {
	ListGroups(ctx context.Context, filterStates ...string) (kadm.ListedGroups, error)
	FetchManyOffsets(ctx context.Context, groups ...string) kadm.FetchOffsetsResponses
}

// GroupDestination is what group sync reads and writes on the destination
// cluster (a *kadm.Client).
type GroupDestination interface {
	GroupSource
	ListStartOffsets(ctx context.Context, topics ...string) (kadm.ListedOffsets, error)
	ListEndOffsets(ctx context.Context, topics ...string) (kadm.ListedOffsets, error)
	CommitOffsets(ctx context.Context, group string, os kadm.Offsets) (kadm.OffsetResponses, error)
}

// Groups syncs consumer-group offsets from a source to a destination.
type Groups struct {
	src GroupSource
	dst GroupDestination
	log hclog.Logger

	mu     sync.Mutex
	active map[string]bool // groups skipped as active at the last sync, to log changes only
}

// NewGroups returns a group offset sync from src to dst; log may be nil.
func NewGroups(src GroupSource, dst GroupDestination, log hclog.Logger) *Groups {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Groups{src: src, dst: dst, log: log, active: map[string]bool{}}
}

// ClampOffset is the offset a committed source offset becomes on the
// destination (KIP-1279 §6.3): never past what the destination holds, so
// that a consumer resuming there skips nothing, and never before its log
// start, where there is nothing to read:
// max(destination log start, min(source committed, destination log end)).
func ClampOffset(committed, logStart, logEnd int64) int64 {
	return max(logStart, min(committed, logEnd))
}

// inactiveStates are the group states of a group with no active members.
// A group the destination does not know has none either.
var inactiveStates = []string{"", "Empty", "Dead"}

// Sync copies the committed offsets of the groups f matches on the
// partitions parts (topic to partition numbers) to the destination, for
// every such group that has no active members there: each offset clamped
// by ClampOffset, committed with leader epoch -1 and the source's metadata,
// and only when it moves the destination's committed offset forward. Items
// is the number of groups in sync after it. A group that became active
// meanwhile (its commit refused as coming from no member) is skipped and
// logged, not an error; errors of single groups do not stop the others and
// are returned together.
func (g *Groups) Sync(ctx context.Context, f *mirrorspec.GroupFilter, parts map[string][]int32) (Result, error) {
	if len(parts) == 0 {
		return Result{}, nil
	}
	listed, err := g.src.ListGroups(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("listing the source's consumer groups: %w", err)
	}
	var names []string
	for name := range listed {
		if f.Match(name) {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return Result{}, nil
	}
	slices.Sort(names)

	want := map[string]map[int32]bool{}
	for t, ps := range parts {
		want[t] = map[int32]bool{}
		for _, p := range ps {
			want[t][p] = true
		}
	}
	var errs []error
	committed := map[string]kadm.Offsets{} // group -> source offsets on parts
	for _, r := range fetchOffsets(ctx, g.src, names) {
		if r.Err != nil {
			errs = append(errs, fmt.Errorf("group %q: fetching its offsets on the source: %w", r.Group, r.Err))
			continue
		}
		os := kadm.Offsets{}
		for t, ps := range r.Fetched {
			for p, o := range ps {
				if o.Err == nil && o.At >= 0 && want[t][p] {
					os.Add(o.Offset)
				}
			}
		}
		if len(os) > 0 {
			committed[r.Group] = os
		}
	}
	if len(committed) == 0 {
		return Result{}, errors.Join(errs...)
	}

	dstGroups, err := g.dst.ListGroups(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("listing the destination's consumer groups: %w", err)
	}
	var candidates []string
	active := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(committed)) {
		if st := dstGroups[name].State; !slices.Contains(inactiveStates, st) {
			active[name] = true
			continue
		}
		candidates = append(candidates, name)
	}
	g.logActive(active)
	if len(candidates) == 0 {
		return Result{}, errors.Join(errs...)
	}

	topics := map[string]bool{}
	for _, name := range candidates {
		for t := range committed[name] {
			topics[t] = true
		}
	}
	topicList := slices.Sorted(maps.Keys(topics))
	starts, err := g.dst.ListStartOffsets(ctx, topicList...)
	if err != nil {
		return Result{}, fmt.Errorf("listing the destination's log start offsets: %w", err)
	}
	ends, err := g.dst.ListEndOffsets(ctx, topicList...)
	if err != nil {
		return Result{}, fmt.Errorf("listing the destination's log end offsets: %w", err)
	}
	current := fetchOffsets(ctx, g.dst, candidates)

	res := Result{}
	for _, name := range candidates {
		cur, ok := current[name]
		if !ok || cur.Err != nil {
			if ok && !errors.Is(cur.Err, kerr.GroupIDNotFound) {
				errs = append(errs, fmt.Errorf("group %q: fetching its offsets on the destination: %w", name, cur.Err))
				continue
			}
		}
		commit := kadm.Offsets{}
		var perr []error
		committed[name].Each(func(o kadm.Offset) {
			s, sok := starts.Lookup(o.Topic, o.Partition)
			e, eok := ends.Lookup(o.Topic, o.Partition)
			switch {
			case !sok || !eok:
				perr = append(perr, fmt.Errorf("%s/%d: not on the destination", o.Topic, o.Partition))
				return
			case s.Err != nil || e.Err != nil:
				perr = append(perr, fmt.Errorf("%s/%d: listing its offsets: %w", o.Topic, o.Partition, errors.Join(s.Err, e.Err)))
				return
			}
			target := ClampOffset(o.At, s.Offset, e.Offset)
			if have, ok := cur.Fetched.Lookup(o.Topic, o.Partition); ok && have.Err == nil && have.At >= target {
				return // never backwards; in sync
			}
			commit.Add(kadm.Offset{Topic: o.Topic, Partition: o.Partition, At: target, LeaderEpoch: -1, Metadata: o.Metadata})
		})
		if len(perr) > 0 {
			errs = append(errs, fmt.Errorf("group %q: %w", name, errors.Join(perr...)))
			continue
		}
		if len(commit) == 0 {
			res.Items++
			continue
		}
		err := awaitCoordinator(ctx, func() error {
			resp, err := g.dst.CommitOffsets(ctx, name, commit)
			if err == nil {
				err = resp.Error()
			}
			return err
		})
		switch {
		case errors.Is(err, kerr.UnknownMemberID), errors.Is(err, kerr.IllegalGeneration), errors.Is(err, kerr.RebalanceInProgress):
			// Members joined since ListGroups: the group is active.
			active[name] = true
			g.logActive(active)
			continue
		case err != nil:
			errs = append(errs, fmt.Errorf("group %q: committing its offsets on the destination: %w", name, err))
			continue
		}
		res.Items++
		g.log.Debug("synced consumer group offsets", "group", name, "partitions", len(commit.Sorted()))
	}
	return res, errors.Join(errs...)
}

// A group request on a cluster where no group was used yet makes the broker
// create __consumer_offsets, and until its partitions have leaders every
// group request answers COORDINATOR_NOT_AVAILABLE; a coordinator that moved
// or is loading answers NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS.
// kadm returns these per group without retrying, so group sync waits for
// the coordinator a bounded time: the final sync of a failover must not
// give up on a fresh destination (seen on Apache Kafka, which kfake does not
// show: its coordinator is always there).
const coordinatorTries = 40

var coordinatorBackoff = 250 * time.Millisecond // a variable for the tests

func coordinatorPending(err error) bool {
	return errors.Is(err, kerr.CoordinatorNotAvailable) || errors.Is(err, kerr.NotCoordinator) ||
		errors.Is(err, kerr.CoordinatorLoadInProgress)
}

// awaitCoordinator runs fn until it returns something other than a pending
// coordinator, at most coordinatorTries times.
func awaitCoordinator(ctx context.Context, fn func() error) error {
	for try := 1; ; try++ {
		err := fn()
		if !coordinatorPending(err) || try == coordinatorTries {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(coordinatorBackoff):
		}
	}
}

// fetchOffsets is FetchManyOffsets, asking again for the groups whose
// coordinator is pending.
func fetchOffsets(ctx context.Context, adm GroupSource, names []string) kadm.FetchOffsetsResponses {
	out := kadm.FetchOffsetsResponses{}
	ask := names
	_ = awaitCoordinator(ctx, func() error {
		var again []string
		for name, r := range adm.FetchManyOffsets(ctx, ask...) {
			out[name] = r
			if coordinatorPending(r.Err) {
				again = append(again, name)
			}
		}
		if ask = again; len(ask) == 0 {
			return nil
		}
		return kerr.CoordinatorNotAvailable // some are pending: ask those again
	})
	return out
}

// logActive logs the groups skipped because they are active on the
// destination when that set changes (KIP-1279 discussion, MM3).
func (g *Groups) logActive(active map[string]bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for name := range active {
		if !g.active[name] {
			g.log.Info("consumer group has active members on the destination: its offsets are not synced while it does", "group", name)
		}
	}
	for name := range g.active {
		if !active[name] {
			g.log.Info("consumer group no longer active on the destination: syncing its offsets again", "group", name)
		}
	}
	g.active = maps.Clone(active)
}
