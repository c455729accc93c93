// Package verify compares a source topic with its mirror offset by offset.
//
// It is the engine of `kmirror verify` and of every identity test: for each
// partition and each isolation level it walks the consumer-visible records of
// both logs in offset order, at the same time, and checks the invariant of
// DESIGN.md §3: at every offset, a record a consumer can see on one side is
// seen on the other with the same key, value, headers and timestamp, and an
// offset no consumer sees on one side (a transaction marker, an aborted
// record under read_committed, a compaction hole) is invisible on the other
// too. Memory stays bounded by a fetch response or two per side, whatever
// the length of the logs (key-aware comparisons also keep the records seen
// on one side only until their key shows up again).
package verify

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Isolation is a consumer isolation level.
type Isolation string

const (
	ReadUncommitted Isolation = "read_uncommitted"
	ReadCommitted   Isolation = "read_committed"
)

func (i Isolation) level() int8 {
	if i == ReadCommitted {
		return 1
	}
	return 0
}

func (i Isolation) kgo() kgo.IsolationLevel {
	if i == ReadCommitted {
		return kgo.ReadCommitted()
	}
	return kgo.ReadUncommitted()
}

// endName names the offset a consumer at this level reads up to.
func (i Isolation) endName() string {
	if i == ReadCommitted {
		return "last stable offset"
	}
	return "high watermark"
}

// Side names one of the two clusters in reports and errors.
type Side string

const (
	Source      Side = "source"
	Destination Side = "destination"
)

// Kind classifies a mismatch. For two visible records that differ, Kind is
// the first differing field in the order key, value, headers, timestamp
// (the descriptions list every differing field).
type Kind string

const (
	// KindOffset only comes out of Record.Diff: Compare pairs records by
	// offset.
	KindOffset    Kind = "offset"
	KindKey       Kind = "key"
	KindValue     Kind = "value"
	KindHeaders   Kind = "headers"
	KindTimestamp Kind = "timestamp"
	// KindMissing: a consumer sees a record at this offset on the source
	// and none on the destination.
	KindMissing Kind = "missing"
	// KindExtra: a consumer sees a record at this offset on the
	// destination and none on the source.
	KindExtra Kind = "extra"
	// KindShift: the records differ and the destination record equals the
	// source record just before or just after it, the signature of offsets
	// that moved. The description says by how much.
	KindShift Kind = "shift"
	// KindLogStart: the logs start at different offsets, so offsets
	// readable on one side are gone on the other. Offset is the smaller
	// log start.
	KindLogStart Kind = "log-start"
	// KindEnd: within the requested range one log ends before the other
	// (high watermark under read_uncommitted, last stable offset under
	// read_committed). Offset is the first offset only the longer side has.
	KindEnd Kind = "end"
	// KindPartition: the partition exists on one side only. Offset is -1.
	KindPartition Kind = "partition"
)

// DefaultMaxMismatches is how many mismatches a report keeps when
// Options.MaxMismatches is zero. All mismatches are counted regardless.
const DefaultMaxMismatches = 10

// Options selects what Compare compares.
type Options struct {
	// Topic is compared under the same name on both sides.
	Topic string
	// Partitions to compare; nil means every partition of either side.
	Partitions []int32
	// From is the first offset to compare.
	From int64
	// To is the exclusive end of the range to compare; 0 or negative means
	// no bound. The range actually compared is [From, To) clipped to what
	// both logs hold: it stops at the smaller of the two log ends (high
	// watermark under read_uncommitted, last stable offset under
	// read_committed) and a log that ends earlier within [From, To) is a
	// KindEnd mismatch (see AllowLag). Offsets below a side's log start are
	// unreadable there: when the log starts differ and From is below the
	// later start, that is a KindLogStart mismatch and the comparison
	// begins at the later start (see KeyAware for compacted topics).
	To int64
	// PartitionTo is a per-partition To: an entry bounds its partition
	// instead of To, and an entry at or below From compares nothing there
	// (a partition with nothing mirrored). kmirror verify
	// --to-last-mirrored fills it with each stopped partition's last
	// mirrored offset + 1, so that writes after a failover are left out.
	PartitionTo map[int32]int64
	// Isolation lists the levels to check; nil means read_uncommitted then
	// read_committed. Each level reads both logs once.
	Isolation []Isolation
	// MaxMismatches is how many mismatches Report.Mismatches keeps (the
	// first ones in isolation, partition, offset order); 0 means
	// DefaultMaxMismatches, negative means all. Report.TotalMismatches
	// always counts every one.
	MaxMismatches int
	// KeyAware is for compacted topics, where each side's cleaner removes
	// superseded records on its own schedule. A record visible on one side
	// only is then not a mismatch if a later offset holds, on both sides, a
	// record with the same (non-null) key: the lone record was superseded
	// and compacted away on the other side. Records with null keys and
	// lone records whose key never reappears on both sides stay mismatches.
	// The log-start rule becomes the same rule: the records between the two
	// log starts are read on the side that still has them and each must be
	// superseded. Two records at the same offset must still be equal.
	// Memory then also grows with the number of lone records awaiting a
	// later record of their key.
	KeyAware bool
	// AllowLag accepts a destination log that ends before the source one,
	// as it does while mirroring is catching up; a destination that ends
	// after the source is still a mismatch.
	AllowLag bool
}

// Offsets are one side's log bounds for a partition, measured before
// reading.
type Offsets struct {
	LogStart      int64
	HighWatermark int64
	LastStable    int64
}

// End is the offset a consumer at iso reads up to.
func (o Offsets) End(iso Isolation) int64 {
	if iso == ReadCommitted {
		return o.LastStable
	}
	return o.HighWatermark
}

// PartitionReport summarises one partition at one isolation level.
type PartitionReport struct {
	Partition int32
	Isolation Isolation
	// From and To bound the compared offsets, [From, To).
	From, To int64
	// Compared counts offsets where both sides had a visible record.
	Compared int64
	// SourceVisible and DestinationVisible count the visible records each
	// side had in [From, To) (from its own log start if later).
	SourceVisible, DestinationVisible int64
	// Source and Destination are the log bounds measured before reading.
	Source, Destination Offsets
	// Mismatches counts this partition's mismatches at this level.
	Mismatches int64
	// Superseded counts, with KeyAware, the lone records that were not
	// mismatches because a later record of their key is on both sides.
	Superseded int64
}

// Mismatch is one break of the invariant. Source and Destination are short
// descriptions of what each side has there.
type Mismatch struct {
	Partition   int32
	Offset      int64
	Isolation   Isolation // empty for KindPartition, which holds at every level
	Kind        Kind
	Source      string
	Destination string
}

// Report is the outcome of Compare.
type Report struct {
	Topic      string
	Partitions []PartitionReport
	// Mismatches holds the first mismatches in (isolation as listed in
	// Options, partition, offset) order, at most Options.MaxMismatches.
	Mismatches []Mismatch
	// TotalMismatches counts all mismatches, kept or not.
	TotalMismatches int64
}

// OK reports whether no mismatch was found.
func (r Report) OK() bool { return r.TotalMismatches == 0 }

// side is what Compare learns about one cluster before reading.
type side struct {
	cl      *kgo.Client
	name    Side
	topicID [16]byte
	parts   map[int32]partInfo
}

type partInfo struct {
	leader  int32
	offsets Offsets
}

// Compare compares opts.Topic on src and dst. The clients are used as they
// are (seed brokers, TLS, SASL); Compare only issues metadata, list-offsets
// and fetch requests, so any client that can reach the cluster works,
// including one that also produces or consumes.
//
// On error the returned report covers what was compared before the error.
func Compare(ctx context.Context, src, dst *kgo.Client, opts Options) (Report, error) {
	opts, err := opts.normalize()
	if err != nil {
		return Report{}, err
	}
	if src == nil || dst == nil {
		return Report{}, errors.New("verify: source and destination clients are required")
	}
	rep := Report{Topic: opts.Topic}
	col := newCollector(opts)

	// Destination first: a running mirror only ever makes the destination
	// catch up with the source, so measuring the destination before the
	// source can make it look behind (AllowLag) but never ahead.
	d, err := loadSide(ctx, dst, Destination, opts.Topic)
	if err != nil {
		return rep, err
	}
	s, err := loadSide(ctx, src, Source, opts.Topic)
	if err != nil {
		return rep, err
	}

	parts := opts.Partitions
	if parts == nil {
		for p := range s.parts {
			parts = append(parts, p)
		}
		for p := range d.parts {
			if _, ok := s.parts[p]; !ok {
				parts = append(parts, p)
			}
		}
		slices.Sort(parts)
	}
	var both []int32
	for _, p := range parts {
		_, sok := s.parts[p]
		_, dok := d.parts[p]
		switch {
		case sok && dok:
			both = append(both, p)
		case !sok && !dok:
			return Report{Topic: opts.Topic}, fmt.Errorf("verify: partition %d of %s exists on neither side", p, opts.Topic)
		default:
			col.add(Mismatch{Partition: p, Offset: -1, Kind: KindPartition,
				Source: presence(sok), Destination: presence(dok)})
		}
	}

	finish := func() Report {
		rep.Mismatches, rep.TotalMismatches = col.result()
		return rep
	}
	for _, iso := range opts.Isolation {
		for _, p := range both {
			c := partitionCompare{opts: opts, col: col, src: s, dst: d, iso: iso, p: p}
			pr, err := c.run(ctx)
			rep.Partitions = append(rep.Partitions, pr)
			if err != nil {
				return finish(), fmt.Errorf("verify %s partition %d (%s): %w", opts.Topic, p, iso, err)
			}
		}
	}
	return finish(), nil
}

func presence(ok bool) string {
	if ok {
		return "partition exists"
	}
	return "no such partition"
}

func (o Options) normalize() (Options, error) {
	if o.Topic == "" {
		return o, errors.New("verify: a topic is required")
	}
	if o.From < 0 {
		return o, fmt.Errorf("verify: From %d is negative", o.From)
	}
	if o.Isolation == nil {
		o.Isolation = []Isolation{ReadUncommitted, ReadCommitted}
	}
	for _, iso := range o.Isolation {
		if iso != ReadUncommitted && iso != ReadCommitted {
			return o, fmt.Errorf("verify: unknown isolation level %q (want %q or %q)", iso, ReadUncommitted, ReadCommitted)
		}
	}
	if o.MaxMismatches == 0 {
		o.MaxMismatches = DefaultMaxMismatches
	}
	return o, nil
}

// loadSide reads the topic's partitions, leaders and log bounds.
func loadSide(ctx context.Context, cl *kgo.Client, name Side, topic string) (*side, error) {
	adm := kadm.NewClient(cl) // not closed: that would close the caller's client
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("verify: %s metadata for %s: %w", name, topic, err)
	}
	td, ok := md.Topics[topic]
	if !ok {
		return nil, fmt.Errorf("verify: %s has no topic %s", name, topic)
	}
	if td.Err != nil {
		return nil, fmt.Errorf("verify: %s topic %s: %w", name, topic, td.Err)
	}
	s := &side{cl: cl, name: name, topicID: td.ID, parts: make(map[int32]partInfo, len(td.Partitions))}

	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("verify: %s log start offsets of %s: %w", name, topic, err)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("verify: %s high watermarks of %s: %w", name, topic, err)
	}
	stables, err := adm.ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = stables.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("verify: %s last stable offsets of %s: %w", name, topic, err)
	}
	for p, pd := range td.Partitions {
		if pd.Err != nil && pd.Leader < 0 {
			return nil, fmt.Errorf("verify: %s %s[%d] has no leader: %w", name, topic, p, pd.Err)
		}
		st, ok1 := starts.Lookup(topic, p)
		en, ok2 := ends.Lookup(topic, p)
		ls, ok3 := stables.Lookup(topic, p)
		if !ok1 || !ok2 || !ok3 {
			return nil, fmt.Errorf("verify: %s %s[%d]: offsets missing from list-offsets answer", name, topic, p)
		}
		s.parts[p] = partInfo{leader: pd.Leader, offsets: Offsets{LogStart: st.Offset, HighWatermark: en.Offset, LastStable: ls.Offset}}
	}
	return s, nil
}

// partitionCompare is one partition at one isolation level.
type partitionCompare struct {
	opts     Options
	col      *collector
	src, dst *side
	iso      Isolation
	p        int32

	pr PartitionReport
	// pending holds, with KeyAware, lone records by key until a later
	// record with the same key shows up on both sides.
	pending map[string][]lone
}

type lone struct {
	rec  Record
	side Side
}

func (c *partitionCompare) run(ctx context.Context) (PartitionReport, error) {
	so, do := c.src.parts[c.p].offsets, c.dst.parts[c.p].offsets
	c.pr = PartitionReport{Partition: c.p, Isolation: c.iso, Source: so, Destination: do}

	// limit clips a log end to the requested range, so that logs that
	// differ only outside [From, To) compare equal.
	to, bounded := c.opts.To, c.opts.To > 0
	if v, ok := c.opts.PartitionTo[c.p]; ok {
		to, bounded = v, true
	}
	limit := func(end int64) int64 {
		if bounded && to < end {
			end = to
		}
		return max(end, c.opts.From)
	}
	srcEnd, dstEnd := limit(so.End(c.iso)), limit(do.End(c.iso))
	loStart, hiStart := min(so.LogStart, do.LogStart), max(so.LogStart, do.LogStart)

	start := max(c.opts.From, hiStart)
	if c.opts.KeyAware {
		// Read from the earlier log start: the records only one side
		// still has must each be superseded.
		start = max(c.opts.From, loStart)
	} else if so.LogStart != do.LogStart && c.opts.From < hiStart && (!bounded || loStart < to) {
		c.mismatch(Mismatch{Offset: loStart, Kind: KindLogStart,
			Source:      fmt.Sprintf("log starts at %d", so.LogStart),
			Destination: fmt.Sprintf("log starts at %d", do.LogStart)})
	}
	end := max(min(srcEnd, dstEnd), start)
	c.pr.From, c.pr.To = start, end

	if srcEnd != dstEnd && !(c.opts.AllowLag && dstEnd < srcEnd) {
		c.mismatch(Mismatch{Offset: min(srcEnd, dstEnd), Kind: KindEnd,
			Source:      fmt.Sprintf("%s %d", c.iso.endName(), so.End(c.iso)),
			Destination: fmt.Sprintf("%s %d", c.iso.endName(), do.End(c.iso))})
	}
	if start >= end {
		return c.pr, nil
	}

	sr := newPartitionReader(c.src.cl, Source, c.opts.Topic, c.src.topicID, c.p, c.src.parts[c.p].leader, c.iso, max(start, so.LogStart), end)
	dr := newPartitionReader(c.dst.cl, Destination, c.opts.Topic, c.dst.topicID, c.p, c.dst.parts[c.p].leader, c.iso, max(start, do.LogStart), end)

	var prevSrc *Record // the last source record, for the shift hint
	for {
		a, err := sr.peek(ctx, 0)
		if err != nil {
			return c.pr, err
		}
		b, err := dr.peek(ctx, 0)
		if err != nil {
			return c.pr, err
		}
		switch {
		case a == nil && b == nil:
			c.flushPending()
			return c.pr, nil

		case b == nil || (a != nil && a.Offset < b.Offset):
			ra := FromKgo(a)
			c.pr.SourceVisible++
			c.loneRecord(ra, Source, do.LogStart)
			prevSrc = &ra
			sr.pop()

		case a == nil || b.Offset < a.Offset:
			c.pr.DestinationVisible++
			c.loneRecord(FromKgo(b), Destination, so.LogStart)
			dr.pop()

		default:
			ra, rb := FromKgo(a), FromKgo(b)
			c.pr.SourceVisible++
			c.pr.DestinationVisible++
			c.pr.Compared++
			if c.opts.KeyAware && ra.Key != nil && bytesEqualNull(ra.Key, rb.Key) {
				c.supersede(ra.Key)
			}
			if diff := contentDiff(ra, rb); len(diff) > 0 {
				m := Mismatch{Offset: ra.Offset, Kind: diff[0],
					Source: describeFields(ra, diff), Destination: describeFields(rb, diff)}
				hint, err := shiftHint(ctx, sr, prevSrc, rb)
				if err != nil {
					return c.pr, err
				}
				if hint != "" {
					m.Kind = KindShift
					m.Destination += "; " + hint
				}
				c.mismatch(m)
			}
			prevSrc = &ra
			sr.pop()
			dr.pop()
		}
	}
}

// shiftHint says whether the destination record equals the source record
// just before or just after its offset: a whole run of "differs" then reads
// as one shifted range, which is what happened.
func shiftHint(ctx context.Context, sr *partitionReader, prevSrc *Record, dst Record) (string, error) {
	if prevSrc != nil && len(contentDiff(*prevSrc, dst)) == 0 {
		return fmt.Sprintf("equals the source record at offset %d (destination shifted by +%d)",
			prevSrc.Offset, dst.Offset-prevSrc.Offset), nil
	}
	next, err := sr.peek(ctx, 1)
	if err != nil || next == nil {
		return "", err
	}
	if n := FromKgo(next); len(contentDiff(n, dst)) == 0 {
		return fmt.Sprintf("equals the source record at offset %d (destination shifted by -%d)",
			n.Offset, n.Offset-dst.Offset), nil
	}
	return "", nil
}

// loneRecord handles a record visible on one side only. otherStart is the
// other side's log start, named in the report when the offset is below it.
func (c *partitionCompare) loneRecord(r Record, on Side, otherStart int64) {
	if c.opts.KeyAware && r.Key != nil {
		if c.pending == nil {
			c.pending = make(map[string][]lone)
		}
		c.pending[string(r.Key)] = append(c.pending[string(r.Key)], lone{rec: r, side: on})
		return
	}
	c.mismatch(loneMismatch(r, on, otherStart, ""))
}

func loneMismatch(r Record, on Side, otherStart int64, note string) Mismatch {
	none := "no visible record"
	if r.Offset < otherStart {
		none = fmt.Sprintf("no record: below the log start %d", otherStart)
	}
	m := Mismatch{Offset: r.Offset, Kind: KindMissing, Source: r.String() + note, Destination: none}
	if on == Destination {
		m.Kind, m.Source, m.Destination = KindExtra, none, r.String()+note
	}
	return m
}

// supersede forgives the lone records of key: a later record with that key
// is on both sides, so compaction may rightly have removed them on one side.
func (c *partitionCompare) supersede(key []byte) {
	if l, ok := c.pending[string(key)]; ok {
		c.pr.Superseded += int64(len(l))
		delete(c.pending, string(key))
	}
}

// flushPending reports the lone records that nothing superseded.
func (c *partitionCompare) flushPending() {
	var left []lone
	for _, l := range c.pending {
		left = append(left, l...)
	}
	slices.SortFunc(left, func(a, b lone) int { return cmp.Compare(a.rec.Offset, b.rec.Offset) })
	so, do := c.src.parts[c.p].offsets, c.dst.parts[c.p].offsets
	for _, l := range left {
		other := do.LogStart
		if l.side == Destination {
			other = so.LogStart
		}
		c.mismatch(loneMismatch(l.rec, l.side, other, " (no later record with this key on both sides)"))
	}
	c.pending = nil
}

func (c *partitionCompare) mismatch(m Mismatch) {
	m.Partition, m.Isolation = c.p, c.iso
	c.pr.Mismatches++
	c.col.add(m)
}

// collector keeps the first MaxMismatches mismatches in report order while
// counting all of them. Mismatches do not arrive in that order (lone records
// of compacted topics are only known at the end of a partition), so it
// trims by sorting once its buffer holds twice the limit.
type collector struct {
	max   int
	order map[Isolation]int
	list  []Mismatch
	total int64
}

func newCollector(o Options) *collector {
	c := &collector{max: o.MaxMismatches, order: make(map[Isolation]int)}
	for i, iso := range o.Isolation {
		if _, ok := c.order[iso]; !ok {
			c.order[iso] = i
		}
	}
	return c
}

func (c *collector) add(m Mismatch) {
	c.total++
	c.list = append(c.list, m)
	if c.max > 0 && len(c.list) >= 2*c.max {
		c.trim()
	}
}

func (c *collector) trim() {
	slices.SortStableFunc(c.list, func(a, b Mismatch) int {
		return cmp.Or(
			cmp.Compare(c.rank(a.Isolation), c.rank(b.Isolation)),
			cmp.Compare(a.Partition, b.Partition),
			cmp.Compare(a.Offset, b.Offset),
		)
	})
	if c.max > 0 && len(c.list) > c.max {
		clear(c.list[c.max:])
		c.list = c.list[:c.max]
	}
}

// rank orders isolation levels as Options lists them; the level-less
// partition mismatches come first.
func (c *collector) rank(iso Isolation) int {
	if r, ok := c.order[iso]; ok {
		return r
	}
	return -1
}

func (c *collector) result() ([]Mismatch, int64) {
	c.trim()
	return c.list, c.total
}
