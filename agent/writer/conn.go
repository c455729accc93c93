package writer

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
)

// The writer's produce and marker requests to a broker go over a connection
// of its own (orderedConn), not through the client. Kafka reads a
// connection's next request only once it has answered the one before, so
// requests written to one connection are applied in the order written; kgo
// gives produce requests one connection and WriteTxnMarkers another, which
// orders nothing between a partition's batches and the filler markers
// between them. On one connection the batches that follow a marker go out
// right behind it and are appended after it, without waiting for its
// answer (what a marker itself waits for is in sink.takeLocked).
//
// The connection is the one kgo would open: the client's dialer (with its
// TLS), its client id and software name, its first SASL mechanism
// (SaslHandshake v1, then SaslAuthenticate, as kgo does). A session the
// broker gives a lifetime is retired before that ends.

// lane is one of the writer's ordered connections to a broker, with its
// sink. A partition keeps the lane it was given on its leader (laneOf), so
// its writes stay in order; partitions on different lanes do not wait for
// each other's requests, which a broker handles one at a time per
// connection.
type lane struct {
	node int32
	n    int
}

// reach is how the writer writes to one broker: over how many ordered
// connections (lanes), with how many produce requests in flight on each,
// and how many batches of one partition in requests not yet answered (its
// window). A broker is near or far by the round trip measured on the first
// connection to it (measure); the two cost differently:
//
// Fewer lanes coalesce more partitions into each request, which a
// destination broker pays for per request and per append; more lanes keep
// one slow partition's acks=all wait (its request holds the connection)
// from holding up the others. A partition's filler markers wait for their
// lane to be idle (sink.takeLocked), so the partitions of a lane that write
// markers go in step: one produce request, then one WriteTxnMarkers
// request, for all of them. On Kafka 4.4.0 (BenchmarkMirrorMaker, compacted
// source with 50% holes), one lane mirrored 18.0, 15.7 and 16.1 MB/s with
// the destination broker busy 1.30–1.36 cores; two lanes 16.3, 12.3 and
// 15.3 MB/s at 1.39–1.43 cores; four 13.0 and sixteen 11.4. Two lanes with
// windows of 32 everywhere halved the batches per request and cost the
// destination brokers 20–29% more CPU per GB on transactional, compacted
// and plain sources. So a near broker gets one lane, as Kafka's own
// producer keeps.
//
// Requests in flight hide the network round trip, not the broker's
// acks=all wait: Kafka reads the next request of a connection only once it
// answered the last. The window is what a wide-area link needs. Kafka
// keeps the metadata of a producer's last 5 batches per partition to
// recognize a resent one, which is why a producer that retries keeps 5 in
// flight; the mirror never resends a batch on its own: after an error it
// reads the destination end and writes from there, and a batch the broker
// no longer recognizes is refused out of sequence, never appended twice
// (only the next sequence is appended, and it is the same batch at the
// same offset). Near, 16: on a slower machine, where 16 gave 141.6–148.4
// MB/s on loopback and across 50 ms, 64 dropped loopback to 99.6–104.3
// (smaller requests: the destination brokers spent 9.8–10.0 CPU-s per GB
// against 7.2).
//
// Far, with the agent 50 ms from a Kafka 4.4.0 destination whose test link
// carries one connection at 168 MB/s at most (netshape.Window), both bind
// in turn: one lane made 133–146 MB/s (windows of 16: 16 batches of 91 KB
// per 55 ms round trip, 159 MB/s over 6 partitions; or 32), two lanes and
// windows of 32 190–196. A real link's TCP window bounds one connection
// the same way.
type reach struct {
	lanes    int // ordered connections
	inflight int // produce requests in flight per lane
	window   int // batches of one partition in requests not yet answered
}

var (
	nearReach = reach{lanes: 1, inflight: 16, window: NearWindow}
	farReach  = reach{lanes: 2, inflight: 32, window: FarWindow}
)

// NearWindow and FarWindow are how many batches of one partition the writer
// keeps in requests not yet answered, to a near and to a far broker
// (Pending.Window).
const (
	NearWindow = 16
	FarWindow  = 32
)

// farRTT is the round trip from which a broker is far: above a region's
// (a millisecond or two between zones), below a wide-area link's (30–100
// ms).
const farRTT = 10 * time.Millisecond

// farLocked says whether node was measured far; w.mu held.
func (w *Writer) farLocked(node int32) bool {
	rtt, ok := w.rtts[node]
	return ok && rtt >= w.farRTT
}

// reachLocked is how the writer writes to node; w.mu held.
func (w *Writer) reachLocked(node int32) reach {
	if w.farLocked(node) {
		return w.far
	}
	return w.near
}

// lockMeasured takes w.mu once node is measured (measure), or once
// measuring it gave up: one lock on the write path after the first write.
func (w *Writer) lockMeasured(ctx context.Context, node int32) {
	w.mu.Lock()
	if _, known := w.rtts[node]; !known {
		w.mu.Unlock()
		w.measure(ctx, node)
		w.mu.Lock()
	}
}

// measure learns how far node is, once, before a partition of it takes a
// lane: the round trip of the handshake of its first ordered connection
// (dialOrdered). A caller whose ctx ends first, or whose connection fails
// to open, goes on unmeasured: its partition takes a near broker's lane,
// keeps it if the broker turns out far (laneOfLocked), and a later call
// measures. A broker found far makes its sinks far.
func (w *Writer) measure(ctx context.Context, node int32) {
	opened := make(chan *orderedConn, 1)
	go func() {
		c, _ := w.ordered(lane{node, 0})
		opened <- c
	}()
	var c *orderedConn
	select {
	case c = <-opened:
	case <-ctx.Done():
	}
	if c == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, known := w.rtts[node]; known {
		return
	}
	w.rtts[node] = c.rtt
	reaches.Store(c.addr, Reach{Addr: c.addr, RTT: c.rtt, Lanes: w.reachLocked(node).lanes})
	if w.farLocked(node) {
		for l, s := range w.sinks {
			if l.node == node {
				s.far.Store(true)
			}
		}
	}
}

// laneAt is the lane a partition was given on its leader.
type laneAt struct {
	node int32
	n    int
}

// laneOf is the lane of a partition led by node: the one it was given
// while node has led it, else the least used lane of node, once node is
// measured (measure). Lanes open lazily, so a broker leading k partitions
// gets min(k, lanes) connections.
func (w *Writer) laneOf(ctx context.Context, node int32, topic string, partition int32) lane {
	w.lockMeasured(ctx, node)
	defer w.mu.Unlock()
	return w.laneOfLocked(node, topicPart{topic, partition})
}

// laneOfLocked is laneOf with w.mu held. Every partition's lane is kept,
// with one lane per broker too: one that took a lane before its broker was
// found far keeps it, as its writes in flight must stay in order.
func (w *Writer) laneOfLocked(node int32, tp topicPart) lane {
	if at, ok := w.laneOfTP[tp]; ok {
		if at.node == node {
			return lane(at)
		}
		w.laneUse[lane(at)]--
	}
	best := lane{node, 0}
	for n := range w.reachLocked(node).lanes {
		if l := (lane{node, n}); w.laneUse[l] < w.laneUse[best] {
			best = l
		}
	}
	w.laneUse[best]++
	w.laneOfTP[tp] = laneAt(best)
	return best
}

// orderedConn is one connection to a broker carrying requests in order.
type orderedConn struct {
	addr     string
	nc       net.Conn
	format   *kmsg.RequestFormatter
	versions map[int16]int16 // the broker's highest version of each request
	expiry   time.Time       // when to stop writing to it (SASL lifetime); zero: never
	rtt      time.Duration   // the shortest of its ApiVersions round trips (handshake)
	timeout  time.Duration   // how long the broker may take to answer
	// markers, when set, is how long the broker may take to answer a
	// WriteTxnMarkers request (Writer.SetMarkersDeadline).
	markers time.Duration

	wmu  sync.Mutex // held while a request is written: one at a time, in call order
	corr int32      // guarded by wmu
	buf  []byte     // the request being written, guarded by wmu

	mu       sync.Mutex
	waiting  []*call   // written and not answered, in write order
	deadline time.Time // the read deadline set, zero: none
	err      error     // why the connection broke; set once
}

// call is one request written to an orderedConn.
type call struct {
	req  kmsg.Request
	corr int32
	resp kmsg.Response
	err  error
	done chan struct{} // closed once resp or err is set
	// by, for markers, is when the connection is reset unless they are
	// answered (zero: the connection's timeout alone).
	by time.Time
}

// failedCall is a call for req that err kept off the wire.
func failedCall(req kmsg.Request, err error) *call {
	k := &call{req: req, err: err, done: make(chan struct{})}
	close(k.done)
	return k
}

// maxKeptBuffer is the largest request buffer a connection keeps for its
// next request; a larger one (a request of big batches) is let go.
const maxKeptBuffer = 4 << 20

// maxResponse bounds a response's size, as kgo's BrokerMaxReadBytes does.
const maxResponse = 100 << 20

// produceMaxVersion is the newest Produce version the writer sends (see
// ClientOpts: v12 and up switch the broker to implicit transaction adds).
const produceMaxVersion = 11

// dialOrdered opens a connection to addr as cl would, and authenticates it;
// timeout and markers are the orderedConn's, confirm the handshake's.
func dialOrdered(ctx context.Context, cl *kgo.Client, addr string, timeout, markers, confirm time.Duration) (*orderedConn, error) {
	// The client's dialer: the one it was given, or its own, which does
	// TLS when the client was given a TLS configuration.
	dial, _ := cl.OptValue(kgo.Dialer).(func(context.Context, string, string) (net.Conn, error))
	if dial == nil {
		return nil, errors.New("the destination client has no dialer")
	}
	nc, err := dial(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("connecting to broker %s: %w", addr, err)
	}
	id, _ := cl.OptValue(kgo.ClientID).(string)
	c := &orderedConn{addr: addr, nc: nc, format: kmsg.NewRequestFormatter(kmsg.FormatterClientID(id)), timeout: timeout, markers: markers}
	if deadline, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(deadline)
	}
	if err := c.handshake(ctx, cl, confirm); err != nil {
		nc.Close()
		return nil, err
	}
	_ = nc.SetDeadline(time.Time{})
	go c.read()
	return c, nil
}

// rttProbes is how many ApiVersions requests a connection's handshake
// sends, one at a time: the shortest round trip is its distance to the
// broker (a broker's pause or a busy machine only lengthens one).
const rttProbes = 3

// rttConfirm is how many more times, rttSpacing apart, a handshake asks
// while every round trip so far took confirm or more: a near broker whose
// answers were slow for a moment gets a longer time to show its distance.
// On Kafka 4.4.0, during `make test` on a 2-core machine with other
// packages' brokers running, a broker on loopback answered all three of
// rttProbes in more than 10 ms, and the writer took it for a far one. A
// broker that is far costs rttConfirm round trips more, once per first
// connection.
const (
	rttConfirm = 5
	rttSpacing = 20 * time.Millisecond
)

// handshake asks the broker's versions and authenticates, one request at a
// time, before the reader starts; then it asks the versions again, timing
// each (rtt), and, while none came under confirm (when set), up to
// rttConfirm times more. The first ask is timed too; the others come after
// authentication, as a broker that requires SASL takes one ApiVersions
// request before SaslHandshake and closes a connection sending another
// (Kafka's SaslServerAuthenticator).
func (c *orderedConn) handshake(ctx context.Context, cl *kgo.Client, confirm time.Duration) error {
	av := kmsg.NewPtrApiVersionsRequest()
	av.Version = 3
	if nv := cl.OptValues(kgo.SoftwareNameAndVersion); len(nv) == 2 {
		av.ClientSoftwareName, _ = nv[0].(string)
		av.ClientSoftwareVersion, _ = nv[1].(string)
	}
	ask := func() (*kmsg.ApiVersionsResponse, error) {
		start := time.Now()
		resp, err := c.roundTrip(av)
		if err != nil {
			return nil, fmt.Errorf("asking broker %s its versions: %w", c.addr, err)
		}
		if took := time.Since(start); c.rtt == 0 || took < c.rtt {
			c.rtt = took
		}
		avr := resp.(*kmsg.ApiVersionsResponse)
		if err := kerr.ErrorForCode(avr.ErrorCode); err != nil {
			return nil, fmt.Errorf("asking broker %s its versions: %w", c.addr, err)
		}
		return avr, nil
	}
	avr, err := ask()
	if err != nil {
		return err
	}
	c.versions = make(map[int16]int16, len(avr.ApiKeys))
	for _, k := range avr.ApiKeys {
		c.versions[k.ApiKey] = k.MaxVersion
	}
	if ms, _ := cl.OptValue(kgo.SASL).([]sasl.Mechanism); len(ms) > 0 {
		if err := c.authenticate(ctx, ms[0]); err != nil {
			return err
		}
	}
	for range rttProbes - 1 {
		if _, err := ask(); err != nil {
			return err
		}
	}
	for range rttConfirm {
		if confirm <= 0 || c.rtt < confirm {
			break
		}
		select {
		case <-ctx.Done():
			return nil // what was measured stands
		case <-time.After(rttSpacing):
		}
		if _, err := ask(); err != nil {
			return err
		}
	}
	return nil
}

// authenticate runs mechanism m over SaslHandshake and SaslAuthenticate.
func (c *orderedConn) authenticate(ctx context.Context, m sasl.Mechanism) error {
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Mechanism = m.Name()
	if err := c.setVersion(hs); err != nil {
		return err
	}
	if hs.Version < 1 {
		return fmt.Errorf("broker %s offers SaslHandshake v0 only, which frames authentication outside Kafka requests: not supported", c.addr)
	}
	resp, err := c.roundTrip(hs)
	if err != nil {
		return fmt.Errorf("SASL handshake with broker %s: %w", c.addr, err)
	}
	if err := kerr.ErrorForCode(resp.(*kmsg.SASLHandshakeResponse).ErrorCode); err != nil {
		return fmt.Errorf("SASL handshake (%s) with broker %s: %w", m.Name(), c.addr, err)
	}
	session, out, err := m.Authenticate(ctx, c.addr)
	if err != nil {
		return fmt.Errorf("SASL %s with broker %s: %w", m.Name(), c.addr, err)
	}
	start := time.Now()
	var lifetime int64
	for done := false; !done || len(out) > 0; {
		ar := kmsg.NewPtrSASLAuthenticateRequest()
		ar.SASLAuthBytes = out
		if err := c.setVersion(ar); err != nil {
			return err
		}
		resp, err := c.roundTrip(ar)
		if err != nil {
			return fmt.Errorf("SASL %s with broker %s: %w", m.Name(), c.addr, err)
		}
		r := resp.(*kmsg.SASLAuthenticateResponse)
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			msg := ""
			if r.ErrorMessage != nil {
				msg = ": " + *r.ErrorMessage
			}
			return fmt.Errorf("SASL %s with broker %s: %w%s", m.Name(), c.addr, err, msg)
		}
		lifetime = r.SessionLifetimeMillis
		out = nil
		if !done {
			if done, out, err = session.Challenge(r.SASLAuthBytes); err != nil {
				return fmt.Errorf("SASL %s with broker %s: %w", m.Name(), c.addr, err)
			}
		}
	}
	if lifetime > 0 {
		// Retired a tenth early (a second at least): writes stop, what is
		// in flight is answered, and the next request opens a new one.
		life := time.Duration(lifetime) * time.Millisecond
		c.expiry = start.Add(life - max(life/10, time.Second))
	}
	return nil
}

// setVersion gives req the newest version both sides know.
func (c *orderedConn) setVersion(req kmsg.Request) error {
	v, ok := c.versions[req.Key()]
	if !ok {
		return fmt.Errorf("broker %s does not support %s requests", c.addr, kmsg.NameForKey(req.Key()))
	}
	v = min(v, req.MaxVersion())
	if req.Key() == int16(kmsg.Produce) {
		v = min(v, produceMaxVersion)
	}
	req.SetVersion(v)
	return nil
}

// roundTrip writes req and reads its answer (the handshake, before read).
func (c *orderedConn) roundTrip(req kmsg.Request) (kmsg.Response, error) {
	c.corr++
	if _, err := c.nc.Write(c.format.AppendRequest(nil, req, c.corr)); err != nil {
		return nil, err
	}
	corr, body, err := c.readFrame()
	if err != nil {
		return nil, err
	}
	if corr != c.corr {
		return nil, fmt.Errorf("answer to request %d where %d was expected", corr, c.corr)
	}
	return parseResponse(req, body)
}

// readFrame reads one response: its correlation id and body.
func (c *orderedConn) readFrame() (int32, []byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(c.nc, size[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(size[:])
	if n < 4 || n > maxResponse {
		return 0, nil, fmt.Errorf("response of %d bytes", n)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(c.nc, body); err != nil {
		return 0, nil, err
	}
	return int32(binary.BigEndian.Uint32(body)), body[4:], nil
}

// parseResponse decodes the body of req's answer.
func parseResponse(req kmsg.Request, body []byte) (kmsg.Response, error) {
	resp := req.ResponseKind()
	if resp.IsFlexible() && resp.Key() != int16(kmsg.ApiVersions) {
		// The response header's tags; ApiVersions keeps the old header.
		r := kbin.Reader{Src: body}
		kmsg.SkipTags(&r)
		if !r.Ok() {
			return nil, fmt.Errorf("reading the header of a %s response: truncated", kmsg.NameForKey(req.Key()))
		}
		body = r.Src
	}
	if err := resp.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("reading a %s response: %w", kmsg.NameForKey(req.Key()), err)
	}
	return resp, nil
}

// send writes req (at the newest version both sides know) and returns the
// call its answer completes. Calls are written in the order send is called.
func (c *orderedConn) send(req kmsg.Request) (*call, error) {
	if err := c.setVersion(req); err != nil {
		return nil, err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.corr++
	k := &call{req: req, corr: c.corr, done: make(chan struct{})}
	// One buffer, reused: Write returns once the bytes are out, and
	// batches are copied into it rather than held per request.
	c.buf = c.format.AppendRequest(c.buf[:0], req, k.corr)
	buf := c.buf
	if cap(c.buf) > maxKeptBuffer {
		c.buf = nil
	}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	c.waiting = append(c.waiting, k)
	now := time.Now()
	if _, ok := req.(*kmsg.WriteTxnMarkersRequest); ok && c.markers > 0 {
		k.by = now.Add(c.markers)
	}
	switch {
	case len(c.waiting) == 1:
		c.armLocked(now)
	case !k.by.IsZero() && k.by.Before(c.deadline):
		c.deadline = k.by
		_ = c.nc.SetReadDeadline(k.by)
	}
	c.mu.Unlock()
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.timeout))
	if _, err := c.nc.Write(buf); err != nil {
		c.fail(fmt.Errorf("writing to broker %s: %w", c.addr, err)) // answers k too
	}
	return k, nil
}

// read answers the calls in write order until the connection breaks.
func (c *orderedConn) read() {
	for {
		corr, body, err := c.readFrame()
		if err != nil {
			c.fail(c.readError(err))
			return
		}
		c.mu.Lock()
		if len(c.waiting) == 0 || c.waiting[0].corr != corr {
			c.mu.Unlock()
			c.fail(fmt.Errorf("broker %s answered request %d out of order", c.addr, corr))
			return
		}
		k := c.waiting[0]
		c.waiting[0] = nil
		c.waiting = c.waiting[1:]
		c.armLocked(time.Now())
		c.mu.Unlock()
		k.resp, k.err = parseResponse(k.req, body)
		close(k.done)
	}
}

// armLocked sets the read deadline for the calls waiting, as one is
// written to an idle connection or answered: the connection's timeout from
// now for the oldest (the broker answers in order), and no later than the
// deadline of any markers among them.
func (c *orderedConn) armLocked(now time.Time) {
	var d time.Time
	if len(c.waiting) > 0 {
		d = now.Add(c.timeout)
	}
	if c.markers > 0 { // without a markers deadline no call has one
		for _, k := range c.waiting {
			if !k.by.IsZero() && k.by.Before(d) {
				d = k.by
			}
		}
	}
	c.deadline = d
	_ = c.nc.SetReadDeadline(d)
}

// readError says why reading broke the connection: markers whose deadline
// passed unanswered, or what the read returned.
func (c *orderedConn) readError(err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		c.mu.Lock()
		late := false
		for _, k := range c.waiting {
			late = late || (!k.by.IsZero() && !time.Now().Before(k.by))
		}
		c.mu.Unlock()
		if late {
			return fmt.Errorf("broker %s did not answer filler markers within %v: the connection was reset, so that what the broker has not received of them never arrives: %w", c.addr, c.markers, err)
		}
	}
	return fmt.Errorf("reading from broker %s: %w", c.addr, err)
}

// fail breaks the connection: every call not answered gets err.
func (c *orderedConn) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	err = c.err
	ws := c.waiting
	c.waiting = nil
	c.mu.Unlock()
	reset(c.nc)
	for _, k := range ws {
		k.err = err
		close(k.done)
	}
}

// reset closes nc with an RST (SO_LINGER 0) where it is TCP underneath:
// the kernel drops what it has not delivered yet instead of resending it,
// as a graceful close would, for minutes across a network partition. Every
// call on a connection that breaks is answered with an error and its
// partition goes back to the destination end, so none of it may still
// arrive later, after another agent wrote there.
func reset(nc net.Conn) {
	raw := nc
	if t, ok := nc.(interface{ NetConn() net.Conn }); ok {
		// TLS: its close_notify would be one more write, which a
		// partitioned link holds up.
		raw = t.NetConn()
	}
	if tc, ok := raw.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
		_ = tc.Close()
		return
	}
	_ = nc.Close()
}

// usable says whether new requests may be written: not broken, not expired.
func (c *orderedConn) usable() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err == nil && (c.expiry.IsZero() || time.Now().Before(c.expiry))
}

// pending is how many calls wait for their answer.
func (c *orderedConn) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiting)
}

// errClosed answers what was in flight when the writer closed.
var errClosed = errors.New("the writer was closed")

// ordered returns the writer's connection of lane l, opening a new one when
// there is none, the last broke, its session is about to end, or its broker
// advertises another address. A connection retired at the end of its
// session has its requests answered before the new one's first is written,
// which keeps every partition's requests in order; one to an old address
// fails what it has in flight (their partitions resync).
func (w *Writer) ordered(l lane) (*orderedConn, error) {
	addr, ok := w.meta.Broker(l.node)
	if !ok {
		return nil, fmt.Errorf("no address known for broker %d", l.node)
	}
	// A connection to an address the broker no longer advertises (it
	// moved, or came back elsewhere under its id) is replaced at once.
	current := func() (*orderedConn, bool, error) {
		c, err := w.current(l)
		return c, err == nil && c != nil && c.usable() && c.addr == addr, err
	}
	c, ok, err := current()
	if err != nil || ok {
		return c, err
	}
	// One opening at a time: two callers must not each open one for the
	// lane, which would split its requests over two connections.
	w.dialMu.Lock()
	defer w.dialMu.Unlock()
	if c, ok, err = current(); err != nil || ok {
		return c, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.timeout)
	defer cancel()
	if c != nil {
		for c.addr == addr && c.pending() > 0 && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
		c.fail(fmt.Errorf("connection to broker %d at %s retired", l.node, c.addr))
	}
	// The first lane's connection is the one measure reads.
	var confirm time.Duration
	if l.n == 0 {
		confirm = w.farRTT
	}
	nc, err := dialOrdered(ctx, w.cl, addr, w.timeout+10*time.Second, w.markersDeadline, confirm)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		nc.fail(errClosed)
		return nil, errClosed
	}
	w.conns[l] = nc
	return nc, nil
}

// current is lane l's connection, nil when it has none.
func (w *Writer) current(l lane) (*orderedConn, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, errClosed
	}
	return w.conns[l], nil
}

// Close closes the writer's connections; what they had in flight fails.
// The client is the caller's to close.
func (w *Writer) Close() {
	w.mu.Lock()
	w.closed = true
	cs := w.conns
	w.conns = map[lane]*orderedConn{}
	w.mu.Unlock()
	for _, c := range cs {
		c.fail(errClosed)
	}
}
