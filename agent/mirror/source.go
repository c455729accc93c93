package mirror

// The runner's connection to its mirror's source: what the last connection
// learned (the source's cluster id, the preflight's findings and the
// destination transaction timeout it chose, or why the mirror does not run)
// and, while connected, the source client and the fetcher every partition
// mirror reads from.

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/leaders"
	"github.com/kmirror/kmirror/agent/topics"
	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// connection is what a runner keeps of its source connection. It calls
// nothing of the runner, which may call it with its own lock held.
type connection struct {
	log hclog.Logger

	mu     sync.Mutex
	source *sourceReader    // the connected source, nil when none
	fetch  *fetcher.Fetcher // its fetcher, nil when not connected
	// clusterID is the source's cluster id, from its metadata when the
	// mirror last connected; empty until it has.
	clusterID string
	// txnTimeout is the timeout of the partitions' destination
	// transactions, chosen by the last preflight from the destination's
	// transaction.max.timeout.ms (zero before the first), and
	// txnTimeoutFrom says where it came from (describe).
	txnTimeout     time.Duration
	txnTimeoutFrom string
	warnings       []string // the last preflight's findings
	err            string   // why the mirror does not run; empty when it does
}

// up records the connected source and its fetcher.
func (c *connection) up(src *sourceReader, f *fetcher.Fetcher) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.source, c.fetch = src, f
}

// down records that the source is not connected.
func (c *connection) down() { c.up(nil, nil) }

// sourceNow is the connected source, nil when none.
func (c *connection) sourceNow() *sourceReader {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.source
}

// setClusterID records the source's cluster id; keep, that it shows the id
// only until the source's own is read.
func (c *connection) setClusterID(id string, keep bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !keep || c.clusterID == "" {
		c.clusterID = id
	}
}

// clusterIDNow is the source's cluster id as last read.
func (c *connection) clusterIDNow() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.clusterID
}

// preflight records what the preflight check of a connection found.
func (c *connection) preflight(report topics.Report) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.txnTimeout != report.TxnTimeout || c.txnTimeoutFrom != report.TxnTimeoutFrom {
		c.log.Info("destination transaction timeout", "timeout", report.TxnTimeout, "from", report.TxnTimeoutFrom)
	}
	c.txnTimeout, c.txnTimeoutFrom = report.TxnTimeout, report.TxnTimeoutFrom
	c.warnings = nil
	for _, f := range report.Findings {
		c.warnings = append(c.warnings, f.String())
	}
}

// txnTimeoutNow is the timeout of the destination transactions of the
// partitions started now: the last preflight's choice (zero before the
// first: partition.New's default).
func (c *connection) txnTimeoutNow() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.txnTimeout
}

// setErr records why the mirror does not run (nil: it does), logging it
// when it changes.
func (c *connection) setErr(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		c.err = ""
		return
	}
	if c.err != err.Error() {
		c.log.Error("mirror not running", "error", err)
	}
	c.err = err.Error()
}

// statusInto puts into st what describe shows of the connection.
func (c *connection) statusInto(st *mirrorapi.Mirror) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st.Error, st.Warnings = c.err, slices.Clone(c.warnings)
	st.SourceClusterID = c.clusterID
	st.TxnTimeoutMs, st.TxnTimeoutFrom = c.txnTimeout.Milliseconds(), c.txnTimeoutFrom
	if c.fetch != nil {
		st.BufferedBytes = c.fetch.Buffered()
	}
}

// sourceReader is what a partition mirror reads of its source cluster.
type sourceReader struct {
	cl   *kgo.Client
	meta *leaders.Cache
}

func (s sourceReader) Bounds(ctx context.Context, topic string, partition int32) (leaders.Bounds, error) {
	return s.meta.Bounds(ctx, topic, partition)
}

func (s sourceReader) ReadAt(ctx context.Context, tp fetcher.TP, offset int64, maxBytes int32) (fetcher.Chunk, error) {
	return fetcher.ReadAt(ctx, s.cl, s.meta, tp, offset, maxBytes)
}
