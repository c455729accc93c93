package devcluster

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/internal/netshape"
)

func TestStartOptions(t *testing.T) {
	port := freeAdjacentPorts(t, 3)
	c := startT(t, Name("src"), Brokers(3), FirstPort(port))
	want := []string{
		fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("127.0.0.1:%d", port+1), fmt.Sprintf("127.0.0.1:%d", port+2),
	}
	if got := c.Bootstrap(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("Bootstrap() = %v, want %v", got, want)
	}
	if got := c.BootstrapString(); got != strings.Join(want, ",") {
		t.Fatalf("BootstrapString() = %q", got)
	}
	meta, err := kadm.NewClient(newClient(t, c)).Metadata(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if meta.Cluster != "src" || len(meta.Brokers) != 3 {
		t.Fatalf("metadata: cluster %q with %d brokers, want src with 3", meta.Cluster, len(meta.Brokers))
	}
}

// freeAdjacentPorts returns P such that P..P+n-1 were free a moment ago.
func freeAdjacentPorts(t *testing.T, n int) int {
	t.Helper()
outer:
	for range 20 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if p+n-1 > 65535 {
			continue
		}
		for i := 1; i < n; i++ {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+i))
			if err != nil {
				continue outer
			}
			l.Close()
		}
		return p
	}
	t.Fatalf("no %d adjacent free ports found", n)
	return 0
}

func TestStartErrors(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyPort := busy.Addr().(*net.TCPAddr).Port

	for _, tc := range []struct {
		name string
		opts []Option
		want string
	}{
		{"no brokers", []Option{Brokers(0)}, "Brokers must be at least 1"},
		{"negative port", []Option{FirstPort(-5)}, "FirstPort must be between 0 and 65535"},
		{"ports past 65535", []Option{FirstPort(65535), Brokers(2)}, "needs ports up to 65536"},
		{"empty name", []Option{Name("")}, "Name must not be empty"},
		{"port in use", []Option{FirstPort(busyPort)}, fmt.Sprintf("port %d is already in use", busyPort)},
		{"negative latency", []Option{Latency(-time.Second)}, "Latency must not be negative"},
		{"negative bandwidth", []Option{Bandwidth(-1)}, "Bandwidth must not be negative"},
		{"link and latency", []Option{Link(netshape.NewLink(netshape.Shape{})), Latency(time.Second)}, "Link comes with its own shape"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Start(tc.opts...)
			if err == nil {
				c.Close()
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
		})
	}

	_, err = Start(FirstPort(busyPort))
	var inUse *PortInUseError
	if !errors.As(err, &inUse) || inUse.Port != busyPort {
		t.Fatalf("error %v is not a PortInUseError for port %d", err, busyPort)
	}
}

// TestDataDirSurvivesRestart checks that DataDir keeps topics and records
// across Close and Start.
func TestDataDirSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	c := startT(t, DataDir(dir))
	cl := newClient(t, c)
	if err := c.Kfake().CreateTopic("kept", 1, nil); err != nil {
		t.Fatal(err)
	}
	if code := produceRaw(t, c, cl, nil, partBatch{"kept", 0, plain(4).encode(t)})["kept/0"]; code != 0 {
		t.Fatalf("produce: code %d", code)
	}
	cl.Close()
	c.Close()

	c2 := startT(t, DataDir(dir))
	if hw := highWatermark(t, c2, "kept", 0); hw != 4 {
		t.Fatalf("high watermark after restart %d, want 4", hw)
	}
	cl2 := newClient(t, c2, kgo.ConsumeTopics("kept"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if recs := pollN(t, cl2, 4); len(recs) != 4 {
		t.Fatalf("consumed %d records after restart, want 4", len(recs))
	}
}

// TestKfakeFaultsWithStrict checks that kfake's own fault injection still
// works under the strict layer, and that a fault imitating a timeout after
// the append never lets a refused batch into the log.
func TestKfakeFaultsWithStrict(t *testing.T) {
	c := startT(t)
	cl := newClient(t, c)
	if err := c.Kfake().CreateTopic("f", 1, map[string]string{"cleanup.policy": "compact"}); err != nil {
		t.Fatal(err)
	}
	timeout := func() *kfake.FaultHandle {
		return c.Kfake().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "f", Err: kerr.RequestTimedOut})
	}

	// A good batch with REQUEST_TIMED_OUT is still appended (kfake's
	// ambiguous-timeout imitation).
	h := timeout()
	if code := produceRaw(t, c, cl, nil, partBatch{"f", 0, plain(2).encode(t)})["f/0"]; code != kerr.RequestTimedOut.Code {
		t.Fatalf("good batch with timeout fault: code %d, want REQUEST_TIMED_OUT", code)
	}
	if h.Hits() != 1 || highWatermark(t, c, "f", 0) != 2 {
		t.Fatalf("hits %d, high watermark %d; want 1 and 2", h.Hits(), highWatermark(t, c, "f", 0))
	}

	// A refused batch with the same fault: the test's fault was added
	// first and gives the code, but the batch must not land.
	h = timeout()
	if code := produceRaw(t, c, cl, nil, partBatch{"f", 0, withNullKey(plain(2)).encode(t)})["f/0"]; code != kerr.RequestTimedOut.Code {
		t.Fatalf("keyless batch with timeout fault: code %d, want REQUEST_TIMED_OUT", code)
	}
	if hw := highWatermark(t, c, "f", 0); h.Hits() != 1 || hw != 2 {
		t.Fatalf("hits %d, high watermark %d; want 1 and 2 (the refused batch must not be appended)", h.Hits(), hw)
	}

	// The strict fault left behind by that request must not refuse the
	// next good batch.
	if code := produceRaw(t, c, cl, nil, partBatch{"f", 0, plain(1).encode(t)})["f/0"]; code != 0 {
		t.Fatalf("good batch after: code %d", code)
	}

	// DeleteRecords on the compact-only topic with a timed-out fault: the
	// log start must not move.
	c.Kfake().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.DeleteRecords}, Topic: "f", Err: kerr.RequestTimedOut})
	req := kmsg.NewPtrDeleteRecordsRequest()
	rt := kmsg.NewDeleteRecordsRequestTopic()
	rt.Topic = "f"
	rp := kmsg.NewDeleteRecordsRequestTopicPartition()
	rp.Offset = 2
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	if _, err := req.RequestWith(testCtx(t), cl); err != nil {
		t.Fatal(err)
	}
	if ls := c.Kfake().PartitionInfo("f", 0).LogStartOffset; ls != 0 {
		t.Fatalf("log start offset %d after a refused DeleteRecords, want 0", ls)
	}
}

// startT is devclustertest.Start for this package's own tests, which cannot
// import it (it imports this package); their clusters log nowhere.
func startT(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	c, err := Start(opts...)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(c.Close)
	return c
}
