package partition

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
	rb "github.com/kmirror/kmirror/internal/recordbatch"
)

// Source producers of the log shapes.
const (
	prodA = 101 // transactional
	prodB = 102 // transactional
	prodC = 103 // transactional
	prodP = 200 // idempotent
	prodN = -1  // neither
)

// logShape is a source log a partition mirror must copy offset for offset:
// the decisions of forward, writeVisible, writeAborted, invisible, the abort
// tracker and splitting compacted batches each have shapes here.
type logShape struct {
	name string
	// first is the offset of the first batch, start the log start offset
	// (above first: the source's log starts inside that batch).
	first, start int64
	build        func(b *logBuilder)
}

func (s logShape) log(t *testing.T) *srcLog {
	b := newLog(t, s.first, max(s.first, s.start))
	s.build(b)
	return b.done()
}

var logShapes = []logShape{
	{name: "plain batches of every codec", build: func(b *logBuilder) {
		b.plain(prodP, rb.CodecNone, 1)
		b.plain(prodP, rb.CodecGzip, 3)
		b.plain(prodP, rb.CodecSnappy, 2)
		b.plain(prodP, rb.CodecLZ4, 4)
		b.plain(prodP, rb.CodecZstd, 5)
		b.plain(prodN, rb.CodecNone, 2)
	}},
	{name: "committed transaction", build: func(b *logBuilder) {
		b.plain(prodP, rb.CodecNone, 1)
		b.txn(prodA, rb.CodecNone, 1)
		b.txn(prodA, rb.CodecNone, 1)
		b.txn(prodA, rb.CodecLZ4, 3)
		b.commit(prodA)
		b.plain(prodP, rb.CodecNone, 2)
	}},
	{name: "aborted transaction", build: func(b *logBuilder) {
		b.plain(prodP, rb.CodecNone, 1)
		b.txn(prodA, rb.CodecNone, 1)
		b.txn(prodA, rb.CodecZstd, 2)
		b.txn(prodA, rb.CodecNone, 1)
		b.abort(prodA)
		b.plain(prodP, rb.CodecNone, 1)
	}},
	{name: "interleaved committed and aborted transactions", build: func(b *logBuilder) {
		b.txn(prodA, rb.CodecNone, 1)
		b.txn(prodB, rb.CodecNone, 1)
		b.plain(prodP, rb.CodecNone, 1)
		b.txn(prodA, rb.CodecNone, 2)
		b.txn(prodB, rb.CodecLZ4, 1)
		b.commit(prodA)
		b.txn(prodB, rb.CodecNone, 1)
		b.abort(prodB)
		b.plain(prodP, rb.CodecNone, 1)
	}},
	{name: "aborted transactions of one producer back to back", build: func(b *logBuilder) {
		b.txn(prodA, rb.CodecNone, 1)
		b.abort(prodA)
		b.txn(prodA, rb.CodecNone, 2)
		b.abort(prodA)
		b.txn(prodA, rb.CodecNone, 1)
		b.commit(prodA)
		b.plain(prodP, rb.CodecNone, 1)
	}},
	{name: "aborted transactions of two producers back to back", build: func(b *logBuilder) {
		b.txn(prodA, rb.CodecNone, 1)
		b.abort(prodA)
		b.txn(prodB, rb.CodecNone, 1)
		b.abort(prodB)
		b.plain(prodP, rb.CodecNone, 1)
	}},
	{name: "log ending with an abort marker", build: func(b *logBuilder) {
		b.plain(prodP, rb.CodecNone, 2)
		b.txn(prodA, rb.CodecNone, 2)
		b.abort(prodA)
	}},
	{name: "consecutive markers", build: func(b *logBuilder) {
		b.txn(prodA, rb.CodecNone, 1)
		b.txn(prodB, rb.CodecNone, 1)
		b.txn(prodC, rb.CodecNone, 1)
		b.commit(prodA)
		b.abort(prodB)
		b.commit(prodC)
		b.plain(prodP, rb.CodecNone, 1)
	}},
	{name: "holes between batches", build: func(b *logBuilder) {
		b.gap(2)
		b.plain(prodP, rb.CodecNone, 3)
		b.gap(3)
		b.plain(prodP, rb.CodecLZ4, 1)
		b.gap(1)
		b.plain(prodP, rb.CodecNone, 2)
	}},
	{name: "compacted batches with holes", build: func(b *logBuilder) {
		b.compacted(prodP, false, rb.CodecNone, 10, 0, 3, 4, 9)
		b.compacted(prodP, false, rb.CodecLZ4, 6, 2, 3)     // leading and trailing holes
		b.compacted(prodP, false, rb.CodecZstd, 4, 1)       // one record left
		b.compacted(prodP, false, rb.CodecGzip, 5, 0, 2, 4) // every other one
		b.plain(prodP, rb.CodecNone, 1)
	}},
	{name: "empty batch headers", build: func(b *logBuilder) {
		b.plain(prodP, rb.CodecNone, 2)
		b.compacted(prodP, false, rb.CodecNone, 3)
		b.plain(prodP, rb.CodecNone, 1)
		b.compacted(prodP, false, rb.CodecNone, 1)
		b.compacted(prodP, false, rb.CodecNone, 2) // the log's last batch
	}},
	{name: "aborted and committed runs removed by the cleaner", build: func(b *logBuilder) {
		b.plain(prodP, rb.CodecNone, 2)
		b.removedTxn(prodA, 3)
		b.abort(prodA)
		b.plain(prodP, rb.CodecNone, 1)
		b.gap(2)
		b.commit(prodB)
		b.plain(prodP, rb.CodecNone, 1)
	}},
	{name: "compacted transactional batches", build: func(b *logBuilder) {
		b.compacted(prodA, true, rb.CodecNone, 6, 0, 1, 4) // aborted, holes inside the transaction
		b.txn(prodA, rb.CodecNone, 1)
		b.abort(prodA)
		b.compacted(prodB, true, rb.CodecLZ4, 5, 1, 3) // committed
		b.commit(prodB)
		b.compacted(prodC, true, rb.CodecNone, 3) // aborted, emptied
		b.abort(prodC)
		b.plain(prodP, rb.CodecNone, 1)
	}},
	{name: "LogAppendTime batches", build: func(b *logBuilder) {
		b.logAppendTime(prodP, rb.CodecNone, 2)
		b.plain(prodP, rb.CodecNone, 1)
		b.logAppendTime(prodP, rb.CodecLZ4, 3)
	}},
	{name: "log start above zero", first: 7, build: func(b *logBuilder) {
		b.plain(prodP, rb.CodecNone, 2)
		b.txn(prodA, rb.CodecNone, 1)
		b.abort(prodA)
		b.plain(prodP, rb.CodecNone, 1)
	}},
	{name: "log start inside a batch", first: 3, start: 5, build: func(b *logBuilder) {
		b.plain(prodP, rb.CodecLZ4, 6)
		b.plain(prodP, rb.CodecNone, 1)
	}},
	{name: "every shape at once", first: 2, build: func(b *logBuilder) {
		b.plain(prodP, rb.CodecLZ4, 2)
		b.txn(prodA, rb.CodecNone, 1)
		b.txn(prodB, rb.CodecNone, 1)
		b.txn(prodA, rb.CodecZstd, 2)
		b.abort(prodA)
		b.compacted(prodP, false, rb.CodecNone, 4, 0, 2)
		b.txn(prodB, rb.CodecNone, 1)
		b.commit(prodB)
		b.gap(2)
		b.txn(prodA, rb.CodecNone, 1)
		b.compacted(prodA, true, rb.CodecLZ4, 3, 1)
		b.abort(prodA)
		b.compacted(prodP, false, rb.CodecNone, 2)
		b.txn(prodC, rb.CodecNone, 1)
		b.commit(prodC)
		b.removedTxn(prodA, 1)
		b.abort(prodA)
		b.logAppendTime(prodP, rb.CodecNone, 2)
		b.plain(prodN, rb.CodecGzip, 1)
	}},
}

// openAt says whether a mirror that has written l's offsets below cut has
// the destination transaction of aborted records open: it wrote an aborted
// record after the last invisible offset below cut.
func openAt(t *testing.T, l *srcLog, cut int64) bool {
	v := views(t, l.batches)
	for o := cut - 1; o >= l.start; o-- {
		switch v[o].vis {
		case invisible:
			return false
		case abortedRec:
			return true
		}
	}
	return false
}

var fillerMethods = []FillerMethod{FillCoordinator, FillMarkers}

// TestMirrorLogShapes mirrors each source log shape in one run, with each
// filler method, and checks that the destination holds the same offsets
// with the same visibility and records.
func TestMirrorLogShapes(t *testing.T) {
	src := startSource(t)
	dst := devclustertest.Start(t)
	for i, s := range logShapes {
		for _, method := range fillerMethods {
			t.Run(fmt.Sprintf("%s/%s", s.name, method), func(t *testing.T) {
				l := s.log(t)
				r := newRig(t, src, dst, fmt.Sprintf("shape%02d-%s", i, method), l, method)
				p := r.start()
				r.waitMirrored(p, l.end)
				p.kill()
				r.checkIdentical()
			})
		}
	}
}

// TestMirrorRestartAtEveryOffset kills the agent at every offset where it can
// stop between two writes (each batch end, and the log start once aligned),
// inside transactions and between the parts of compacted batches, and lets
// a new process finish the copy from what the destination holds: its
// sequences (recoverSequences), an open transaction of aborted records it
// adopts, the markers in its tail (checkTail). Fetches return two batches
// at most, so that aborted transactions are listed by several of them.
func TestMirrorRestartAtEveryOffset(t *testing.T) {
	src := startSource(t)
	src.mu.Lock()
	src.perFetch = 2
	src.mu.Unlock()
	dst := devclustertest.Start(t)
	for i, s := range logShapes {
		for _, method := range fillerMethods {
			for _, cut := range s.log(t).cuts() {
				t.Run(fmt.Sprintf("%s/%s/at %d", s.name, method, cut), func(t *testing.T) {
					l := s.log(t)
					r := newRig(t, src, dst, fmt.Sprintf("restart%02d-%s-%d", i, method, cut), l, method)
					l.setServed(cut)
					p := r.start()
					r.waitMirrored(p, cut)
					p.kill()
					// The dead process left the transaction of aborted
					// records open exactly when it wrote aborted records
					// after the last invisible offset.
					if b, open := r.bounds(), openAt(t, l, cut); (b.LastStable < b.HighWatermark) != open {
						t.Errorf("after the kill at %d: destination last stable offset %d, end %d; want a transaction open: %v", cut, b.LastStable, b.HighWatermark, open)
					}
					l.setServed(1 << 62)
					p = r.start()
					r.waitMirrored(p, l.end)
					p.kill()
					r.checkIdentical()
				})
			}
		}
	}
}

// TestMirrorRestartedInProcess stops the partition mirror at random moments
// and starts another in the same process, on the same writer and fetcher,
// as the runner does when a partition is taken from this agent and given
// back: a request of the stopped mirror may still be on its way through the
// writer's connections, and a fetch through the fetcher, while the next one
// fences and reads the destination. Then the process is killed and a new
// one finishes the copy, the sequence after which an agent once found a
// duplicate marker (TestAgentGroupLoneRestart). Fetches return one batch,
// so that every shape takes many writes. The destination is a dev cluster
// of each engine (the source logs are served from memory by an embedded
// one, as in every test here).
func TestMirrorRestartedInProcess(t *testing.T) {
	src := startSource(t)
	src.mu.Lock()
	src.perFetch = 1
	src.mu.Unlock()
	for _, e := range []struct {
		engine devcluster.EngineKind
		// restarts per case, each up to within into the copy
		restarts int
		within   time.Duration
	}{
		{devcluster.Embedded, 25, 4 * time.Millisecond},
		{devcluster.Kafka, 12, 10 * time.Millisecond},
	} {
		t.Run(string(e.engine), func(t *testing.T) {
			dst := devclustertest.Start(t, devcluster.Engine(e.engine), devcluster.Name("inproc-dst"))
			seed := uint64(time.Now().UnixNano())
			t.Logf("seed %d", seed)
			rnd := rand.New(rand.NewPCG(seed, 0))
			restarts := 0
			for i, s := range logShapes {
				for _, method := range fillerMethods {
					t.Run(fmt.Sprintf("%s/%s", s.name, method), func(t *testing.T) {
						l := s.log(t)
						r := newRig(t, src, dst, fmt.Sprintf("inproc-%s-%02d-%s", e.engine, i, method), l, method)
						p := r.start()
						for range e.restarts {
							// Into the copy: a restart during the resync
							// tests less.
							r.mirroring(p)
							time.Sleep(time.Duration(rnd.Int64N(int64(e.within))))
							stopped := p.m
							p.restart()
							restarts++
							if st := stopped.Status(); st.State == Failed {
								_, batches := r.destination()
								t.Fatalf("the partition mirror failed before restart %d: %v\ndestination: %s\nsource: %s",
									restarts, st.Reason, describeBatches(batches), describeBatches(r.log.batches))
							}
						}
						p.kill()
						p = r.start()
						r.waitMirrored(p, l.end)
						p.kill()
						r.checkIdentical()
					})
				}
			}
			t.Logf("%d restarts", restarts)
		})
	}
}

// TestMirrorKilledAtEveryWrite kills the agent at each of its destination
// writes in turn (produce, AddPartitionsToTxn, EndTxn, WriteTxnMarkers,
// DeleteRecords): once with the write lost with the process, once with the
// write applied after the process died (its response lost). A new process
// then finishes the copy. This reaches the points between the dense parts of
// a split compacted batch, between a filler's AddPartitionsToTxn and its
// EndTxn, between an EndTxn and the check of its marker, and between the
// alignment checkpoint and DeleteRecords.
func TestMirrorKilledAtEveryWrite(t *testing.T) {
	src := startSource(t)
	dst := devclustertest.Start(t)
	n := 0
	for i, s := range logShapes {
		switch s.name {
		case "aborted transactions of one producer back to back", "compacted transactional batches",
			"log start above zero", "every shape at once":
		default:
			continue
		}
		for _, method := range fillerMethods {
			for _, applied := range []bool{false, true} {
				fate := "lost"
				if applied {
					fate = "applied"
				}
				for k := 1; ; k++ {
					var finished bool
					t.Run(fmt.Sprintf("%s/%s/write %d %s", s.name, method, k, fate), func(t *testing.T) {
						l := s.log(t)
						r := newRig(t, src, dst, fmt.Sprintf("kill%02d-%s-%s-%d", i, method, fate, k), l, method)
						hold := r.holdWrite(k)
						p := r.start()
						select {
						case <-hold.held:
						case <-r.mirroredTo(p, l.end):
							// Fewer than k writes: every point was tried.
							finished = true
							p.kill()
							return
						}
						p.kill()
						if applied {
							hold.apply()
						}
						p = r.start()
						r.waitMirrored(p, l.end)
						p.kill()
						r.checkIdentical()
						n++
					})
					if finished || t.Failed() || k > 200 {
						break
					}
				}
			}
		}
	}
	t.Logf("%d kills", n)
}
