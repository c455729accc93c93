package partition

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/agent/writer"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
	"github.com/kmirror/kmirror/internal/reason"
	rb "github.com/kmirror/kmirror/internal/recordbatch"
)

// produceWrites counts the produce requests written to the destination: a
// client's Dialer, which the writer's own connections use too, sees each
// request in one Write. atMarkers is n when the last WriteTxnMarkers
// request was written.
type produceWrites struct{ n, atMarkers atomic.Int64 }

func (p *produceWrites) dial(ctx context.Context, network, host string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, host)
	if err != nil {
		return nil, err
	}
	return countingConn{c, p}, nil
}

type countingConn struct {
	net.Conn
	p *produceWrites
}

func (c countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if err != nil || len(b) < 6 {
		return n, err
	}
	switch int16(binary.BigEndian.Uint16(b[4:])) {
	case int16(kmsg.Produce):
		c.p.n.Add(1)
	case int16(kmsg.WriteTxnMarkers):
		c.p.atMarkers.Store(c.p.n.Load())
	}
	return n, err
}

// TestPipelineResendsAfterFailedBatch: plain batches are pipelined, and
// when one in the middle of the window is refused (NOT_LEADER_OR_FOLLOWER),
// the batches sent behind it are refused out of sequence; the partition
// resyncs from the destination end and sends them again in order, with no
// failure and an identical log. The destination holds the refused request
// until the partition has written two more behind it, so the case does not
// depend on timing.
func TestPipelineResendsAfterFailedBatch(t *testing.T) {
	src := startSource(t)
	dst := devclustertest.Start(t)
	for _, method := range fillerMethods {
		t.Run(string(method), func(t *testing.T) {
			b := newLog(t, 0, 0)
			const batches = 30
			for range batches {
				b.plain(prodP, rb.CodecNone, 3)
			}
			l := b.done()
			r := newRig(t, src, dst, "pipeline-"+string(method), l, method)
			writes := &produceWrites{}
			r.dstOpts = []kgo.Opt{kgo.Dialer(writes.dial)}
			var seen, behind atomic.Int64
			kc := dst.Kfake()
			r.destControl(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, bool, bool, error) {
				req := kreq.(*kmsg.ProduceRequest)
				if len(req.Topics) == 0 || req.Topics[0].Topic != r.tp.Topic || seen.Add(1) != 3 {
					return nil, false, false, nil
				}
				// The partition's client writes only its produce
				// requests: those past the third were sent behind it.
				kc.SleepControl(func() {
					for deadline := time.Now().Add(10 * time.Second); writes.n.Load() < 3+2 && time.Now().Before(deadline); {
						time.Sleep(time.Millisecond)
					}
				})
				behind.Store(writes.n.Load() - 3)
				resp := req.ResponseKind().(*kmsg.ProduceResponse)
				rt := kmsg.NewProduceResponseTopic()
				rt.Topic = r.tp.Topic
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition = r.tp.Partition
				rp.ErrorCode = kerr.NotLeaderForPartition.Code
				rt.Partitions = append(rt.Partitions, rp)
				resp.Topics = append(resp.Topics, rt)
				return resp, true, true, nil
			})
			p := r.start()
			r.waitMirrored(p, l.end)
			st := p.m.Status()
			p.kill()
			r.checkIdentical()
			if n := behind.Load(); n < 2 {
				t.Errorf("%d produce requests written behind the held one, want at least 2: the batches were not pipelined", n)
			}
			if st.Retries < 1 || st.State != Mirroring {
				t.Errorf("state %s after %d retries, want MIRRORING after at least one", st.State, st.Retries)
			}
			if got := writes.n.Load(); got < batches+2 {
				t.Errorf("%d produce requests for %d batches: the batches behind the refused one were not sent again", got, batches)
			}
			t.Logf("%d produce requests for %d batches, %d behind the refused one", writes.n.Load(), batches, behind.Load())
		})
	}
}

// TestPipelineWindow: a plain partition keeps the writer's window of
// batches in flight (writer.NearWindow on loopback), through the writer's
// sink too: with the destination holding
// the first produce request, exactly that many are written before it is
// answered, one batch each, and none more.
func TestPipelineWindow(t *testing.T) {
	src := startSource(t)
	dst := devclustertest.Start(t)
	b := newLog(t, 0, 0)
	const batches = 2 * writer.NearWindow
	for range batches {
		b.plain(prodP, rb.CodecNone, 3)
	}
	l := b.done()
	r := newRig(t, src, dst, "window", l, FillMarkers)
	writes := &produceWrites{}
	r.dstOpts = []kgo.Opt{kgo.Dialer(writes.dial)}
	var held atomic.Int64
	var first atomic.Bool
	kc := dst.Kfake()
	r.destControl(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, bool, bool, error) {
		req := kreq.(*kmsg.ProduceRequest)
		if len(req.Topics) == 0 || req.Topics[0].Topic != r.tp.Topic || !first.CompareAndSwap(false, true) {
			return nil, false, false, nil
		}
		kc.SleepControl(func() {
			// Every batch the window allows is written by now;
			// give one beyond it the time to show.
			for deadline := time.Now().Add(10 * time.Second); writes.n.Load() < writer.NearWindow && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
			time.Sleep(200 * time.Millisecond)
			held.Store(writes.n.Load())
		})
		return nil, false, true, nil
	})
	p := r.start()
	r.waitMirrored(p, l.end)
	p.kill()
	r.checkIdentical()
	if n := held.Load(); n != writer.NearWindow {
		t.Errorf("%d produce requests written while the first was held, want the window, %d", n, writer.NearWindow)
	}
}

// TestClassifyMarkers: refused filler markers are retried when retrying may
// help and fail the partition when it cannot, naming the destination's own
// refusal (which discard names in MARKERS_REFUSED).
func TestClassifyMarkers(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		code reason.Code // "" for a retry
		says string
	}{
		{name: "not the leader any more", err: kerr.NotLeaderForPartition},
		{name: "not sent after an earlier refusal", err: writer.ErrNotSent},
		{name: "no right to write markers", err: kerr.ClusterAuthorizationFailed, code: reason.DestinationRefused, says: "ALTER (Kafka 4) or CLUSTER_ACTION"},
		{name: "refused for good otherwise", err: kerr.InvalidRecord, code: reason.DestinationRefused, says: "refused the filler markers at offset 7: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := classifyMarkers(&writer.ProduceError{Topic: "t", Markers: true, Err: tc.err}, 2, 7)
			var f *failure
			if !errors.As(err, &f) {
				if tc.code != "" {
					t.Fatalf("%v: retried, want %s", err, tc.code)
				}
				if !errors.Is(err, tc.err) {
					t.Errorf("the retried error %v does not carry %v", err, tc.err)
				}
				return
			}
			if tc.code == "" {
				t.Fatalf("%v: failed with %s, want a retry", err, f.code)
			}
			if f.code != tc.code || !strings.Contains(f.reason, tc.says) || !errors.Is(f.refused, tc.err) {
				t.Errorf("failed with %s %q (refused %v); want %s saying %q, refused %v", f.code, f.reason, f.refused, tc.code, tc.says, tc.err)
			}
		})
	}
}
