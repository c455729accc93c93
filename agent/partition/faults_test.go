package partition

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
	"github.com/kmirror/kmirror/internal/reason"
	rb "github.com/kmirror/kmirror/internal/recordbatch"
)

// faultCase is a source log shape plus something happening on the
// destination, and what the partition mirror must do about it: absorb it
// and leave an identical log, or stop in FAILED without writing more.
type faultCase struct {
	name string
	// coordinatorOnly: the fault needs coordinator-written fillers.
	coordinatorOnly bool
	// markersOnly: the case is about FillMarkers.
	markersOnly bool
	shape       logShape
	// cut > 0: a first process mirrors the offsets below cut, then is
	// killed (or, with keep, runs on) before between; earlier (a list of
	// offsets) has processes killed before that one at each of them.
	cut     int64
	earlier []int64
	keep    bool
	// arm runs before the first process starts; the check it returns
	// runs at the end.
	arm func(t *testing.T, r *mirrorRig) (check func(t *testing.T))
	// between runs once the first process has mirrored up to cut.
	between func(t *testing.T, r *mirrorRig)
	// fails: the process must stop in FAILED, leaving the destination end
	// at end, with reason code when one is given.
	fails bool
	end   int64
	code  reason.Code
}

func shape(build func(b *logBuilder)) logShape { return logShape{build: build} }

// duplicates arms duplicate markers of the partition's filler (fill) or
// data transactional id, and checks at the end that n were written.
func duplicates(fill, hold bool, n int) func(t *testing.T, r *mirrorRig) func(t *testing.T) {
	return func(t *testing.T, r *mirrorRig) func(t *testing.T) {
		data, filler := r.txnIDs()
		id := data
		if fill {
			id = filler
		}
		// Never removed: see destControl.
		h := r.dst.DuplicateMarkers(devcluster.DuplicateMarkers{TransactionalID: id, Hold: hold})
		r.dup = h
		return func(t *testing.T) {
			if h.Written() != n || h.Err() != nil {
				t.Errorf("%d duplicate markers written (error %v), want %d", h.Written(), h.Err(), n)
			}
		}
	}
}

// foreignBeforeFiller has another producer write one record to the
// partition while the destination holds the filler's EndTxn (or
// WriteTxnMarkers), so that the record takes the offset the filler was
// meant for and pushes the marker up one: checkEnd must not take it for a
// duplicate marker.
func foreignBeforeFiller(t *testing.T, r *mirrorRig) func(t *testing.T) {
	data, fill := r.txnIDs()
	kc := r.dst.Kfake()
	r.destControl(-1, func(kreq kmsg.Request) (kmsg.Response, bool, bool, error) {
		switch req := kreq.(type) {
		case *kmsg.EndTxnRequest:
			if req.TransactionalID != fill {
				return nil, false, false, nil
			}
		case *kmsg.WriteTxnMarkersRequest:
			if !r.isWrite(req, data, fill) {
				return nil, false, false, nil
			}
		default:
			return nil, false, false, nil
		}
		kc.SleepControl(func() { produceForeign(t, r) })
		return nil, false, true, nil
	})
	return func(*testing.T) {}
}

// foreignBeforeNextBatch has a foreign record land right after the agent's
// first filler markers, before the batch the agent sent behind them.
func foreignBeforeNextBatch(t *testing.T, r *mirrorRig) func(t *testing.T) {
	data, fill := r.txnIDs()
	kc := r.dst.Kfake()
	var marked, hit atomic.Bool
	r.destControl(-1, func(kreq kmsg.Request) (kmsg.Response, bool, bool, error) {
		switch req := kreq.(type) {
		case *kmsg.WriteTxnMarkersRequest:
			if r.isWrite(req, data, fill) {
				marked.Store(true)
			}
		case *kmsg.ProduceRequest:
			// hit also keeps the foreign produce itself from coming here.
			if marked.Load() && !hit.Swap(true) {
				kc.SleepControl(func() { produceForeign(t, r) })
				return nil, false, true, nil
			}
		}
		return nil, false, false, nil
	})
	return func(t *testing.T) {
		if !hit.Load() {
			t.Error("no batch followed the filler markers")
		}
	}
}

// refuseMarkersBehind answers the agent's first WriteTxnMarkers with
// CLUSTER_AUTHORIZATION_FAILED once the agent has written the produce
// request behind it (the broker reads that one only after answering).
func refuseMarkersBehind(t *testing.T, r *mirrorRig) func(t *testing.T) {
	writes := &produceWrites{}
	r.dstOpts = append(r.dstOpts, kgo.Dialer(writes.dial))
	data, fill := r.txnIDs()
	kc := r.dst.Kfake()
	var hit atomic.Bool
	r.destControl(int16(kmsg.WriteTxnMarkers), func(kreq kmsg.Request) (kmsg.Response, bool, bool, error) {
		req := kreq.(*kmsg.WriteTxnMarkersRequest)
		if !r.isWrite(req, data, fill) {
			return nil, false, false, nil
		}
		n := writes.atMarkers.Load()
		kc.SleepControl(func() {
			for deadline := time.Now().Add(10 * time.Second); writes.n.Load() == n && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
		})
		hit.Store(writes.n.Load() > n)
		resp := req.ResponseKind().(*kmsg.WriteTxnMarkersResponse)
		for _, m := range req.Markers {
			rm := kmsg.NewWriteTxnMarkersResponseMarker()
			rm.ProducerID = m.ProducerID
			for _, mt := range m.Topics {
				rt := kmsg.NewWriteTxnMarkersResponseMarkerTopic()
				rt.Topic = mt.Topic
				for _, p := range mt.Partitions {
					rp := kmsg.NewWriteTxnMarkersResponseMarkerTopicPartition()
					rp.Partition = p
					rp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
					rt.Partitions = append(rt.Partitions, rp)
				}
				rm.Topics = append(rm.Topics, rt)
			}
			resp.Markers = append(resp.Markers, rm)
		}
		return resp, true, true, nil
	})
	return func(t *testing.T) {
		if !hit.Load() {
			t.Error("the agent did not write the batch after the markers before their answer")
		}
	}
}

func release(t *testing.T, r *mirrorRig) {
	if err := r.dup.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// openTxn opens a transaction of the partition's filler (fill) or data
// transactional id, as a dead agent that sent AddPartitionsToTxn and nothing
// more leaves it.
func openTxn(fill bool) func(t *testing.T, r *mirrorRig) {
	return func(t *testing.T, r *mirrorRig) {
		ctx := context.Background()
		data, filler := r.txnIDs()
		id := data
		if fill {
			id = filler
		}
		st, err := r.dw.DescribeTxn(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.dw.AddPartition(ctx, id, st.Producer, r.tp.Topic, r.tp.Partition); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMirrorDestinationFaults: what checkEnd, checkTail, landed,
// recoverSequences and resync decide when the destination holds what the
// agent did not write where it expected: duplicate markers (review B1),
// markers of a dead agent's transactions (B4), foreign writes, a log that
// is ahead of the source or lost its alignment record, a transaction
// aborted by its timeout (B8), source retention overtaking the mirror.
func TestMirrorDestinationFaults(t *testing.T) {
	src := startSource(t)
	dst := devclustertest.Start(t)
	plainGapPlain := shape(func(b *logBuilder) {
		b.plain(prodP, rb.CodecNone, 1)
		b.gap(1)
		b.plain(prodP, rb.CodecNone, 1)
	})
	for i, tc := range []faultCase{
		{
			name: "duplicate filler marker absorbed by the invisible offsets after it", coordinatorOnly: true,
			shape: shape(func(b *logBuilder) {
				b.plain(prodP, rb.CodecNone, 1)
				b.gap(3)
				b.plain(prodP, rb.CodecNone, 1)
			}),
			arm: duplicates(true, false, 1),
		},
		{
			name: "duplicate filler marker where the source has a visible record", coordinatorOnly: true,
			shape: plainGapPlain, arm: duplicates(true, false, 1), fails: true, end: 3,
		},
		{
			name: "duplicate abort marker absorbed by the source's next marker",
			shape: shape(func(b *logBuilder) {
				b.txn(prodB, rb.CodecNone, 1)
				b.txn(prodA, rb.CodecNone, 1)
				b.abort(prodA)
				b.commit(prodB)
				b.plain(prodP, rb.CodecNone, 1)
			}),
			arm: duplicates(false, false, 1),
		},
		{
			name: "duplicate abort marker where the source has a visible record",
			shape: shape(func(b *logBuilder) {
				b.txn(prodA, rb.CodecNone, 1)
				b.abort(prodA)
				b.plain(prodP, rb.CodecNone, 1)
			}),
			arm: duplicates(false, false, 1), fails: true, end: 3,
		},
		{
			name: "late duplicate marker after a restart, at an invisible source offset", coordinatorOnly: true,
			shape: shape(func(b *logBuilder) {
				b.plain(prodP, rb.CodecNone, 1)
				b.gap(1)
				b.plain(prodP, rb.CodecNone, 1)
				b.gap(1)
				b.plain(prodP, rb.CodecNone, 1)
			}),
			cut: 3, arm: duplicates(true, true, 1), between: release,
		},
		{
			name: "late duplicate marker after a restart, at a visible source offset", coordinatorOnly: true,
			shape: shape(func(b *logBuilder) {
				b.plain(prodP, rb.CodecNone, 1)
				b.gap(1)
				b.plain(prodP, rb.CodecNone, 1)
				b.plain(prodP, rb.CodecNone, 1)
			}),
			cut: 3, arm: duplicates(true, true, 1), between: release, fails: true, end: 4,
		},
		{
			name: "duplicate marker landing between the agent's check and its next write", coordinatorOnly: true,
			shape: plainGapPlain,
			arm: func(t *testing.T, r *mirrorRig) func(t *testing.T) {
				check := duplicates(true, true, 1)(t, r)
				r.beforeProduce(2, func() { release(t, r) })
				return check
			},
			fails: true, end: 4,
		},
		{
			// [0 plain][1 foreign][2 filler]: the foreign record is where
			// the source has an invisible offset, and the marker after it
			// is no duplicate.
			name: "foreign write landing just before a filler marker", coordinatorOnly: true,
			shape: shape(func(b *logBuilder) {
				b.plain(prodP, rb.CodecNone, 1)
				b.gap(2)
				b.plain(prodP, rb.CodecNone, 1)
			}),
			arm: foreignBeforeFiller, fails: true, end: 3,
		},
		{
			// [0 plain][1 foreign][2 marker][3 marker]: one
			// WriteTxnMarkers request fills both offsets of the hole.
			name: "foreign write landing just before filler markers", markersOnly: true,
			shape: shape(func(b *logBuilder) {
				b.plain(prodP, rb.CodecNone, 1)
				b.gap(2)
				b.plain(prodP, rb.CodecNone, 1)
			}),
			// [4 plain]: the batch after the markers follows them without
			// waiting for their answer, lands late and fails the
			// partition (checkLanded finds the foreign record from the
			// markers on).
			arm: foreignBeforeFiller, fails: true, end: 5,
		},
		{
			name:    "foreign write to the destination while the agent is down",
			shape:   shape(func(b *logBuilder) { b.plain(prodP, rb.CodecNone, 2); b.plain(prodP, rb.CodecNone, 1) }),
			cut:     2,
			between: produceForeign,
			fails:   true, end: 3,
		},
		{
			name:  "another writer with the agent's producer id and a newer epoch",
			shape: shape(func(b *logBuilder) { b.plain(prodP, rb.CodecNone, 2); b.plain(prodP, rb.CodecNone, 1) }),
			cut:   2,
			between: func(t *testing.T, r *mirrorRig) {
				b, err := rb.Build(rb.CodecNone, 0, 0, tsBase, r.pid, r.epoch+1, 0, []rb.Record{record(0)})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := r.dw.Produce(context.Background(), r.tp.Topic, r.tp.Partition, b); err != nil {
					t.Fatal(err)
				}
			},
			fails: true, end: 3,
		},
		{
			name:  "destination ahead of a truncated source",
			shape: shape(func(b *logBuilder) { b.plain(prodP, rb.CodecNone, 2); b.plain(prodP, rb.CodecNone, 2) }),
			cut:   4,
			between: func(t *testing.T, r *mirrorRig) {
				b := newLog(t, 0, 0)
				b.plain(prodP, rb.CodecNone, 2)
				r.replaceSource(b.done())
			},
			fails: true, end: 4,
		},
		{
			name:  "aligned destination without its alignment record",
			shape: logShape{first: 7, build: func(b *logBuilder) { b.plain(prodP, rb.CodecNone, 2) }},
			cut:   7,
			between: func(t *testing.T, r *mirrorRig) {
				r.ckpt.forget(r.tp)
			},
			fails: true, end: 7,
		},
		{
			name: "dead agent's filler transaction at an invisible source offset", coordinatorOnly: true,
			shape: plainGapPlain, cut: 1, between: openTxn(true),
		},
		{
			name: "dead agent's filler transaction where the source has a visible record", coordinatorOnly: true,
			shape: shape(func(b *logBuilder) { b.plain(prodP, rb.CodecNone, 1); b.plain(prodP, rb.CodecNone, 1) }),
			cut:   1, between: openTxn(true), fails: true, end: 2,
		},
		{
			name: "dead agent's transaction of aborted records opened before its first record",
			shape: shape(func(b *logBuilder) {
				b.txn(prodA, rb.CodecNone, 1)
				b.abort(prodA)
				b.plain(prodP, rb.CodecNone, 1)
				b.txn(prodB, rb.CodecNone, 2)
				b.abort(prodB)
				b.plain(prodP, rb.CodecNone, 1)
			}),
			cut: 3, between: openTxn(false),
		},
		{
			name: "dead agent's transaction of aborted records opened in a newer epoch than its last records",
			shape: shape(func(b *logBuilder) {
				b.txn(prodA, rb.CodecNone, 1)
				b.abort(prodA)
				b.plain(prodP, rb.CodecNone, 1)
				b.txn(prodB, rb.CodecNone, 1)
				b.abort(prodB)
				b.plain(prodP, rb.CodecNone, 1)
			}),
			// The second process's InitProducerId gives the id a new
			// epoch, in which the third process's adopted transaction
			// holds no record yet: its sequence starts at 0.
			earlier: []int64{2}, cut: 3, between: openTxn(false),
		},
		{
			name: "foreign write while the agent is down inside an aborted transaction",
			shape: shape(func(b *logBuilder) {
				b.txn(prodA, rb.CodecNone, 1)
				b.txn(prodA, rb.CodecNone, 1)
				b.abort(prodA)
			}),
			// The failed partition aborts the open transaction it adopted
			// (closeDataTxn): its marker lands after the foreign record.
			cut: 1, between: produceForeign, fails: true, end: 3,
		},
		{
			name: "source retention overtaking a stopped mirror with a transaction of aborted records open",
			shape: shape(func(b *logBuilder) {
				b.plain(prodP, rb.CodecNone, 1)
				b.txn(prodA, rb.CodecNone, 1)
				b.txn(prodA, rb.CodecNone, 1)
				b.abort(prodA)
				b.plain(prodP, rb.CodecNone, 2)
				b.plain(prodP, rb.CodecNone, 1)
			}),
			// The transaction is aborted first, its marker at 2; the
			// padding follows up to the new log start, 5.
			cut: 2,
			between: func(t *testing.T, r *mirrorRig) {
				r.replaceSource(logShapeOf(t, r.log, 5))
			},
			arm: func(t *testing.T, r *mirrorRig) func(t *testing.T) {
				return func(t *testing.T) {
					if st := r.last.m.Status(); st.LostRecords == 0 {
						t.Error("the records source retention removed are not reported lost")
					}
				}
			},
		},
		{
			name: "transaction of aborted records aborted by its timeout",
			shape: shape(func(b *logBuilder) {
				b.txn(prodA, rb.CodecNone, 1)
				b.txn(prodA, rb.CodecNone, 1)
				b.abort(prodA)
				b.plain(prodP, rb.CodecNone, 1)
			}),
			cut: 1, keep: true,
			between: func(t *testing.T, r *mirrorRig) {
				data, _ := r.txnIDs()
				if _, err := r.dst.TimeoutAbort(context.Background(), data); err != nil {
					t.Fatal(err)
				}
			},
			fails: true, end: 2,
		},
		{
			name: "source transaction decided while the mirror waits at the last stable offset",
			shape: shape(func(b *logBuilder) {
				b.plain(prodP, rb.CodecNone, 1)
				b.txn(prodA, rb.CodecNone, 1) // open at first: the last stable offset is 1
				b.plain(prodP, rb.CodecNone, 2)
				b.txn(prodB, rb.CodecNone, 1)
				b.txn(prodA, rb.CodecNone, 1)
				b.abort(prodA)
				b.commit(prodB)
				b.plain(prodP, rb.CodecNone, 1)
			}),
			cut: 1, keep: true,
			arm: func(t *testing.T, r *mirrorRig) func(t *testing.T) {
				full := r.log
				r.replaceSource(beforeMarker(full, 6, 1))
				r.log.setServed(1 << 62)
				r.full = full
				return nil
			},
			between: func(t *testing.T, r *mirrorRig) {
				// The mirror waits below the open transaction.
				time.Sleep(50 * time.Millisecond)
				if st := r.last.m.Status(); st.DestinationOffset != 1 {
					t.Fatalf("mirrored to %d past the last stable offset 1", st.DestinationOffset)
				}
				r.replaceSource(r.full)
			},
		},
		{
			name: "more invisible offsets in a row than one WriteTxnMarkers request carries", markersOnly: true,
			shape: shape(func(b *logBuilder) {
				b.plain(prodP, rb.CodecNone, 1)
				b.gap(2500)
				b.plain(prodP, rb.CodecNone, 1)
			}),
		},
		{
			name: "destination end read below the marker just written", coordinatorOnly: true,
			shape: plainGapPlain,
			arm: func(t *testing.T, r *mirrorRig) func(t *testing.T) {
				return r.onEndCheck(fillerMarker, func(req *kmsg.ListOffsetsRequest) (kmsg.Response, bool) {
					return listOffsetsAnswer(req, 1), true // the filler took 1: the end is 2
				})
			},
		},
		{
			name: "foreign write right after a filler marker", coordinatorOnly: true,
			shape: plainGapPlain,
			arm: func(t *testing.T, r *mirrorRig) func(t *testing.T) {
				return r.onEndCheck(fillerMarker, func(*kmsg.ListOffsetsRequest) (kmsg.Response, bool) {
					r.dst.Kfake().SleepControl(func() { produceForeign(t, r) })
					return nil, false
				})
			},
			fails: true, end: 3,
		},
		{
			// [0 plain][1 plain, meant for 2]: the destination refuses the
			// markers (the agent lost ALTER) after the batch behind them
			// was written, and appends that batch where they should be.
			name: "filler markers refused with the next batch on its way", markersOnly: true,
			shape: plainGapPlain,
			arm:   refuseMarkersBehind,
			fails: true, end: 2, code: reason.MarkersRefused,
		},
		{
			// [0 plain][1 marker][2 foreign][3 plain, meant for 2]: no end
			// check follows markers; the next batch lands late and fails
			// the partition as a foreign write, not a duplicate marker.
			name: "foreign write right after filler markers", markersOnly: true,
			shape: plainGapPlain,
			arm:   foreignBeforeNextBatch,
			fails: true, end: 4,
		},
		{
			name: "foreign write right after an abort marker",
			shape: shape(func(b *logBuilder) {
				b.txn(prodA, rb.CodecNone, 1)
				b.abort(prodA)
				b.gap(1)
				b.plain(prodP, rb.CodecNone, 1)
			}),
			arm: func(t *testing.T, r *mirrorRig) func(t *testing.T) {
				return r.onEndCheck(abortMarker, func(*kmsg.ListOffsetsRequest) (kmsg.Response, bool) {
					r.dst.Kfake().SleepControl(func() { produceForeign(t, r) })
					return nil, false
				})
			},
			fails: true, end: 3,
		},
		{
			name: "filler transaction committed by another process", coordinatorOnly: true,
			shape: plainGapPlain,
			arm: func(t *testing.T, r *mirrorRig) func(t *testing.T) {
				r.commitInstead(false)
				return nil
			},
			fails: true, end: 2,
		},
		{
			name: "transaction of aborted records committed by another process",
			shape: shape(func(b *logBuilder) {
				b.txn(prodA, rb.CodecNone, 1)
				b.abort(prodA)
				b.plain(prodP, rb.CodecNone, 1)
			}),
			arm: func(t *testing.T, r *mirrorRig) func(t *testing.T) {
				r.commitInstead(true)
				return nil
			},
			fails: true, end: 2,
		},
		{
			name: "filler transactional id forgotten by the destination", coordinatorOnly: true,
			shape: plainGapPlain,
			arm: func(t *testing.T, r *mirrorRig) func(t *testing.T) {
				return r.forgetTxnID(false)
			},
		},
		{
			name: "transactional id of aborted records forgotten by the destination",
			shape: shape(func(b *logBuilder) {
				b.plain(prodP, rb.CodecNone, 1)
				b.txn(prodA, rb.CodecNone, 1)
				b.abort(prodA)
				b.plain(prodP, rb.CodecNone, 1)
			}),
			arm: func(t *testing.T, r *mirrorRig) func(t *testing.T) {
				return r.forgetTxnID(true)
			},
		},
		{
			name:  "write acknowledged below the offset it was sent for",
			shape: shape(func(b *logBuilder) { b.plain(prodP, rb.CodecNone, 2); b.plain(prodP, rb.CodecNone, 1) }),
			arm: func(t *testing.T, r *mirrorRig) func(t *testing.T) {
				r.answerProduce(2, 1) // the second batch, for offset 2, "lands" at 1
				return nil
			},
			fails: true, end: 2,
		},
		{
			name:  "destination end going back between two resyncs",
			shape: shape(func(b *logBuilder) { b.plain(prodP, rb.CodecNone, 2); b.plain(prodP, rb.CodecNone, 1) }),
			cut:   3, keep: true,
			between: func(t *testing.T, r *mirrorRig) {
				r.onEnd(func(req *kmsg.ListOffsetsRequest) (kmsg.Response, bool) {
					return listOffsetsAnswer(req, 2), true
				})
				r.src.failFetch(r.tp.Topic) // an error the mirror retries from a resync
			},
			fails: true, end: 3,
		},
		{
			name: "source retention overtaking a running mirror",
			shape: shape(func(b *logBuilder) {
				b.plain(prodP, rb.CodecNone, 2)
				b.plain(prodP, rb.CodecNone, 3)
				b.txn(prodA, rb.CodecNone, 1)
				b.abort(prodA)
				b.plain(prodP, rb.CodecNone, 1)
			}),
			cut: 2, keep: true,
			between: func(t *testing.T, r *mirrorRig) {
				r.replaceSource(logShapeOf(t, r.log, 5))
			},
			arm: func(t *testing.T, r *mirrorRig) func(t *testing.T) {
				return func(t *testing.T) {
					if st := r.last.m.Status(); st.LostRecords != 3 {
						t.Errorf("%d records reported lost, want 3", st.LostRecords)
					}
				}
			},
		},
	} {
		for _, method := range fillerMethods {
			if tc.coordinatorOnly && method != FillCoordinator || tc.markersOnly && method != FillMarkers {
				continue
			}
			t.Run(tc.name+"/"+string(method), func(t *testing.T) {
				l := tc.shape.log(t)
				r := newRig(t, src, dst, topicName("fault", i, method, tc.cut), l, method)
				var check func(*testing.T)
				if tc.arm != nil {
					check = tc.arm(t, r)
				}
				var p *process
				for _, at := range tc.earlier {
					l.setServed(at)
					p := r.start()
					r.waitMirrored(p, at)
					p.kill()
				}
				if tc.cut > 0 {
					l.setServed(tc.cut)
					p = r.start()
					r.waitMirrored(p, tc.cut)
					if !tc.keep {
						p.kill()
						p = nil
					}
					if tc.between != nil {
						tc.between(t, r)
					}
					r.log.setServed(1 << 62)
				}
				if p == nil {
					p = r.start()
				}
				if tc.fails {
					r.waitFailed(p)
					if got := p.m.Status().ReasonCode; tc.code != "" && got != tc.code {
						t.Errorf("failed with %s, want %s", got, tc.code)
					}
					b := r.bounds()
					if b.HighWatermark != tc.end {
						t.Errorf("the failed partition left the destination end at %d, want %d", b.HighWatermark, tc.end)
					}
					if b.LastStable != b.HighWatermark {
						t.Errorf("the failed partition left a destination transaction open: last stable offset %d, end %d", b.LastStable, b.HighWatermark)
					}
				} else {
					r.waitMirrored(p, r.log.end)
					p.kill()
					r.checkIdentical()
				}
				if check != nil {
					check(t)
				}
			})
		}
	}
}

// beforeMarker is l before the producer's marker at marker: the source's log
// end there, its last stable offset at lso, the transaction's first offset.
func beforeMarker(l *srcLog, marker, lso int64) *srcLog {
	out := &srcLog{start: l.start, end: marker, lso: lso, served: 1 << 62}
	for i, h := range l.headers {
		if h.LastOffset() < marker {
			out.batches = append(out.batches, l.batches[i])
			out.headers = append(out.headers, h)
		}
	}
	for _, a := range l.aborted {
		if a.marker < marker {
			out.aborted = append(out.aborted, a)
		}
	}
	return out
}

// produceForeign writes a record to the partition as an application would.
func produceForeign(t *testing.T, r *mirrorRig) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.dst.Bootstrap()...))
	if err != nil {
		t.Error(err)
		return
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: r.tp.Topic, Partition: r.tp.Partition, Value: []byte("foreign")}).FirstErr(); err != nil {
		t.Error(err)
	}
}

// The marker writes onEndCheck follows.
const (
	fillerMarker = iota // a filler: EndTxn of the filler id, or WriteTxnMarkers
	abortMarker         // EndTxn of the transaction of aborted records
)

// onEndCheck lets fn answer (or pass on, false) the first request for the
// partition's end (ListOffsets, latest, read_uncommitted) after the agent's
// next marker write of the given kind: the end check of checkEnd.
func (r *mirrorRig) onEndCheck(kind int, fn func(*kmsg.ListOffsetsRequest) (kmsg.Response, bool)) func(*testing.T) {
	data, fill := r.txnIDs()
	var armed, hit atomic.Bool
	r.destControl(-1, func(kreq kmsg.Request) (kmsg.Response, bool, bool, error) {
		switch req := kreq.(type) {
		case *kmsg.EndTxnRequest:
			if kind == abortMarker && req.TransactionalID == data || kind == fillerMarker && req.TransactionalID == fill {
				armed.Store(true)
			}
		case *kmsg.WriteTxnMarkersRequest:
			if kind == fillerMarker && r.isWrite(req, data, fill) {
				armed.Store(true)
			}
		case *kmsg.ListOffsetsRequest:
			if armed.Load() && r.asksEnd(req) {
				hit.Store(true)
				resp, handled := fn(req)
				return resp, handled, true, nil
			}
		}
		return nil, false, false, nil
	})
	return func(t *testing.T) {
		if !hit.Load() {
			t.Error("the agent did not read the destination end after its marker")
		}
	}
}

// onEnd lets fn answer the next request for the partition's end.
func (r *mirrorRig) onEnd(fn func(*kmsg.ListOffsetsRequest) (kmsg.Response, bool)) {
	r.destControl(int16(kmsg.ListOffsets), func(kreq kmsg.Request) (kmsg.Response, bool, bool, error) {
		req := kreq.(*kmsg.ListOffsetsRequest)
		if !r.asksEnd(req) {
			return nil, false, false, nil
		}
		resp, handled := fn(req)
		return resp, handled, true, nil
	})
}

// asksEnd says whether req asks for the partition's high watermark.
func (r *mirrorRig) asksEnd(req *kmsg.ListOffsetsRequest) bool {
	if req.IsolationLevel != 0 || len(req.Topics) != 1 || req.Topics[0].Topic != r.tp.Topic || len(req.Topics[0].Partitions) != 1 {
		return false
	}
	return req.Topics[0].Partitions[0].Timestamp == -1
}

// listOffsetsAnswer answers req with offset.
func listOffsetsAnswer(req *kmsg.ListOffsetsRequest, offset int64) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewListOffsetsResponseTopic()
		st.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			sp := kmsg.NewListOffsetsResponseTopicPartition()
			sp.Partition, sp.Offset, sp.Timestamp = rp.Partition, offset, -1
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// commitInstead turns the agent's next abort of its filler (or, with data,
// its aborted records') transaction into a commit, as another process using
// the same transactional id would. The coordinator then reports the
// transaction CompleteCommit (kfake says Empty; ConcurrentTransactions
// reports Kafka's states).
func (r *mirrorRig) commitInstead(data bool) {
	d, f := r.txnIDs()
	id := f
	if data {
		id = d
	}
	r.destControl(int16(kmsg.EndTxn), func(kreq kmsg.Request) (kmsg.Response, bool, bool, error) {
		req := kreq.(*kmsg.EndTxnRequest)
		if req.TransactionalID != id {
			return nil, false, false, nil
		}
		req.Commit = true
		return nil, false, true, nil
	})
	// Never removed: see destControl.
	r.dst.ConcurrentTransactions(devcluster.ConcurrentTransactions{TransactionalID: id, Window: 10 * time.Millisecond})
}

// forgetTxnID answers the agent's next AddPartitionsToTxn of its filler (or,
// with data, its aborted records') transactional id with
// INVALID_PRODUCER_ID_MAPPING, as a destination that expired the id does.
func (r *mirrorRig) forgetTxnID(data bool) func(*testing.T) {
	d, f := r.txnIDs()
	id := f
	if data {
		id = d
	}
	var hit atomic.Bool
	r.destControl(int16(kmsg.AddPartitionsToTxn), func(kreq kmsg.Request) (kmsg.Response, bool, bool, error) {
		req := kreq.(*kmsg.AddPartitionsToTxnRequest)
		if req.TransactionalID != id {
			return nil, false, false, nil
		}
		hit.Store(true)
		resp := req.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
		for _, rt := range req.Topics { // v3 and below: the errors are per partition
			st := kmsg.NewAddPartitionsToTxnResponseTopic()
			st.Topic = rt.Topic
			for _, p := range rt.Partitions {
				sp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
				sp.Partition, sp.ErrorCode = p, kerr.InvalidProducerIDMapping.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, true, true, nil
	})
	return func(t *testing.T) {
		if !hit.Load() {
			t.Error("the agent did not open a transaction")
		}
	}
}

// answerProduce answers the n-th produce request of the agent's plain
// writer itself, with base offset at, without appending anything.
func (r *mirrorRig) answerProduce(n int, at int64) {
	seen := 0
	r.destControl(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, bool, bool, error) {
		req := kreq.(*kmsg.ProduceRequest)
		if len(req.Topics) != 1 || req.Topics[0].Topic != r.tp.Topic || len(req.Topics[0].Partitions) != 1 {
			return nil, false, false, nil
		}
		if seen++; seen < n {
			return nil, false, false, nil
		}
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		st := kmsg.NewProduceResponseTopic()
		st.Topic = r.tp.Topic
		sp := kmsg.NewProduceResponseTopicPartition()
		sp.Partition, sp.BaseOffset = r.tp.Partition, at
		st.Partitions = append(st.Partitions, sp)
		resp.Topics = append(resp.Topics, st)
		return resp, true, true, nil
	})
}

// logShapeOf is l from start on: source retention removed the offsets
// below it.
func logShapeOf(t *testing.T, l *srcLog, start int64) *srcLog {
	t.Helper()
	out := &srcLog{start: start, end: l.end, lso: l.lso, served: 1 << 62, aborted: l.aborted}
	for i, h := range l.headers {
		if h.LastOffset() >= start {
			out.batches = append(out.batches, l.batches[i])
			out.headers = append(out.headers, h)
		}
	}
	return out
}

// beforeProduce runs fn, while the destination holds the request back, before
// the n-th produce request of the agent's plain writer to the partition.
func (r *mirrorRig) beforeProduce(n int, fn func()) {
	kc := r.dst.Kfake()
	seen := 0
	r.destControl(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, bool, bool, error) {
		req := kreq.(*kmsg.ProduceRequest)
		for _, rt := range req.Topics {
			for _, rp := range rt.Partitions {
				if rt.Topic != r.tp.Topic || len(rp.Records) < rb.HeaderSize || int64(binary.BigEndian.Uint64(rp.Records[43:])) != r.pid {
					continue
				}
				if seen++; seen == n {
					kc.SleepControl(fn)
					return nil, false, true, nil
				}
			}
		}
		return nil, false, false, nil
	})
}

func topicName(kind string, i int, method FillerMethod, cut int64) string {
	return fmt.Sprintf("%s%02d-%s-%d", kind, i, method, cut)
}
