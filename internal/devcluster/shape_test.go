package devcluster

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/internal/netshape"
)

// shapeDelay is the one-way latency the tests give a cluster: a request on
// an open connection then takes at least twice it, however idle the
// machine.
const shapeDelay = 40 * time.Millisecond

// requestTime returns how long the fastest of a few ApiVersions requests to
// the first broker took, on a connection opened before the first.
func requestTime(t *testing.T, cl *kgo.Client) time.Duration {
	t.Helper()
	ctx := testCtx(t)
	br := cl.Broker(int(brokerIDs(t, cl)[0]))
	fastest := time.Duration(1<<63 - 1)
	for i := range 4 {
		start := time.Now()
		if _, err := br.Request(ctx, kmsg.NewPtrApiVersionsRequest()); err != nil {
			t.Fatal(err)
		}
		if i > 0 { // the first also opens the connection
			fastest = min(fastest, time.Since(start))
		}
	}
	return fastest
}

func brokerIDs(t *testing.T, cl *kgo.Client) []int32 {
	t.Helper()
	md, err := kadm.NewClient(cl).BrokerMetadata(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	return md.Brokers.NodeIDs()
}

// checkShaped checks that requests to c take the link's round trip, and
// that the brokers its metadata advertises are the bootstrap addresses, so
// that clients never go around the link.
func checkShaped(t *testing.T, c *Cluster) {
	t.Helper()
	if c.Link() == nil || c.Link().Shape().Delay != shapeDelay {
		t.Fatalf("Link() = %v, want a link with a %s delay", c.Link(), shapeDelay)
	}
	cl := newClient(t, c)
	md, err := kadm.NewClient(cl).BrokerMetadata(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	var advertised []string
	for _, b := range md.Brokers {
		advertised = append(advertised, net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))))
	}
	if got, want := strings.Join(advertised, ","), c.BootstrapString(); got != want {
		t.Fatalf("brokers advertise %s, want the bootstrap addresses %s", got, want)
	}
	if d := requestTime(t, cl); d < 2*shapeDelay {
		t.Fatalf("a request took %s, less than the %s round trip of a %s one-way latency", d, 2*shapeDelay, shapeDelay)
	}
}

func TestLatencyEmbedded(t *testing.T) {
	c := startT(t, Latency(shapeDelay), Bandwidth(100e6))
	if got := c.Link().Shape().Bandwidth; got != 100e6 {
		t.Fatalf("bandwidth %d, want 100e6", got)
	}
	checkShaped(t, c)
}

func TestLatencyKafka(t *testing.T) {
	c := startKafkaT(t, Name("shaped"), Latency(shapeDelay), SeedTopics(1, "t"))
	for _, n := range c.kafka.nodes {
		if n.listen == n.port || n.proxy == nil {
			t.Fatalf("broker %d listens on its client port %d: no proxy in front of it", n.id, n.port)
		}
	}
	checkShaped(t, c)
	cl := newClient(t, c, kgo.DefaultProduceTopic("t"))
	if err := cl.ProduceSync(testCtx(t), &kgo.Record{Value: []byte("through the proxy")}).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	if got := consumeAll(t, c, "t", 1); string(got[0].Value) != "through the proxy" {
		t.Fatalf("read back %q", got[0].Value)
	}
}

// TestLinkOption starts a cluster behind an unshaped link and gives the
// link a delay while it runs, as a benchmark does to measure loopback and a
// shaped link on the same clusters.
func TestLinkOption(t *testing.T) {
	l := netshape.NewLink(netshape.Shape{})
	c := startT(t, Link(l))
	if c.Link() != l {
		t.Fatal("Link() is not the link given")
	}
	l.SetShape(netshape.Shape{Delay: shapeDelay})
	checkShaped(t, c)
	if startT(t).Link() != nil {
		t.Fatal("a cluster started without shaping has a link")
	}
}
