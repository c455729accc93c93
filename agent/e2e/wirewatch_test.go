package e2e

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/internal/workload"
)

// wireWatch stands between each agent and the destination's brokers, one
// set of loopback listeners per agent, and notes every produce request an
// agent sends and whether the broker took it. The agents reach the brokers
// only through it: it rewrites the broker addresses of Metadata and
// FindCoordinator answers to its own listeners for that agent. Everything
// else passes byte for byte.
//
// Every agent writes a mirror's partitions with the mirror's producer id and
// the same deterministic sequences, so the destination's log and producer
// state look the same whichever agent wrote; the wire does not. stale finds
// two writers of a partition of a mirror topic: a batch that left one agent
// while another agent's was in flight (sent, not answered yet), or, with
// the same producer id, after another agent's batch with an epoch and
// sequences not older had landed (an agent writing a partition another had
// written past), whatever the broker then did with it.
type wireWatch struct {
	mu    sync.Mutex
	seen  []*produced
	lns   map[string]map[string]string // agent → broker address → listener address
	close []io.Closer
	// names are the topics' names by id, from Metadata answers: a
	// produce names its topics by id from Kafka 4.1 on.
	names map[string]string
	// errs are what the proxies' goroutines could not do, for check.
	errs []string
	// hold keeps each produce answer this long before the agent gets it
	// (and the watch notes it answered): a test that wants two agents'
	// writes in flight at once sets it, so that neither agent's writes
	// fit between the other's.
	hold time.Duration
}

// fail notes what a proxy goroutine could not do (a goroutine may not fail
// the test itself).
func (w *wireWatch) fail(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.errs = append(w.errs, fmt.Sprintf(format, args...))
}

// produced is one partition's batches of one produce request.
type produced struct {
	agent            string
	topic            string // name, or id (hex) when the request named it so
	partition        int32
	sent, answered   time.Time
	landed           bool // answered without error
	pid              int64
	epoch            int16
	first, last, cnt int32 // sequences of the first and last record, records
}

func newWireWatch(t testing.TB) *wireWatch {
	w := &wireWatch{lns: map[string]map[string]string{}, names: map[string]string{}}
	t.Cleanup(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, c := range w.close {
			c.Close()
		}
	})
	return w
}

// bootstrap returns agent's addresses for the brokers at addrs.
func (w *wireWatch) bootstrap(agent string, addrs []string) []string {
	var out []string
	for _, a := range addrs {
		out = append(out, w.listener(agent, a))
	}
	return out
}

// listener returns agent's listener in front of the broker at addr,
// opening it the first time.
func (w *wireWatch) listener(agent, addr string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if l, ok := w.lns[agent][addr]; ok {
		return l
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		w.errs = append(w.errs, fmt.Sprintf("listening for %s in front of %s: %v", agent, addr, err))
		return addr // straight to the broker: check fails the test
	}
	if w.lns[agent] == nil {
		w.lns[agent] = map[string]string{}
	}
	w.lns[agent][addr] = ln.Addr().String()
	w.close = append(w.close, ln)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go w.serve(agent, addr, c)
		}
	}()
	return ln.Addr().String()
}

// request is what the answer to a request needs of it.
type request struct {
	key      int16
	version  int16
	produced []*produced
}

func (w *wireWatch) serve(agent, addr string, client net.Conn) {
	broker, err := net.Dial("tcp", addr)
	if err != nil {
		client.Close()
		return
	}
	w.mu.Lock()
	w.close = append(w.close, client, broker)
	w.mu.Unlock()
	var mu sync.Mutex
	pending := map[int32]*request{}
	go func() { // agent → broker
		// The answers to what the agent sent are still read after it
		// went (killed): when its last batches landed is what the
		// watch is about.
		defer func() {
			for range 300 {
				mu.Lock()
				n := len(pending)
				mu.Unlock()
				if n == 0 {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			broker.Close()
		}()
		for {
			frame, err := readFrame(client)
			if err != nil {
				return
			}
			if len(frame) >= 12 {
				req := &request{key: int16(binary.BigEndian.Uint16(frame[4:])), version: int16(binary.BigEndian.Uint16(frame[6:]))}
				if req.key == int16(kmsg.Produce) {
					req.produced = w.noteProduce(agent, frame)
				}
				mu.Lock()
				pending[int32(binary.BigEndian.Uint32(frame[8:]))] = req
				mu.Unlock()
			}
			if _, err := broker.Write(frame); err != nil {
				return
			}
		}
	}()
	defer client.Close()
	for { // broker → agent
		frame, err := readFrame(broker)
		if err != nil {
			return
		}
		got := time.Now()
		if len(frame) >= 8 {
			corr := int32(binary.BigEndian.Uint32(frame[4:]))
			mu.Lock()
			req := pending[corr]
			delete(pending, corr)
			mu.Unlock()
			if req != nil && req.key == int16(kmsg.Produce) && w.hold > 0 {
				// Until the frame came plus hold: answers of requests
				// in flight together are held together, not in turn.
				time.Sleep(time.Until(got.Add(w.hold)))
			}
			if req != nil {
				frame = w.answer(agent, req, frame)
			}
		}
		_, _ = client.Write(frame) // an agent gone: the answers are still noted
	}
}

func readFrame(r io.Reader) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	frame := make([]byte, 4+binary.BigEndian.Uint32(size[:]))
	copy(frame, size[:])
	_, err := io.ReadFull(r, frame[4:])
	return frame, err
}

// noteProduce notes the batches of a produce request frame.
func (w *wireWatch) noteProduce(agent string, frame []byte) []*produced {
	r := kbin.Reader{Src: frame[4:]}
	key, version := r.Int16(), r.Int16()
	r.Int32()
	r.NullableString()
	req := kmsg.RequestForKey(key).(*kmsg.ProduceRequest)
	req.SetVersion(version)
	if req.IsFlexible() {
		kmsg.SkipTags(&r)
	}
	if err := req.ReadFrom(r.Src); err != nil {
		w.fail("a produce request of %s does not decode: %v", agent, err)
		return nil
	}
	now := time.Now()
	var out []*produced
	for _, t := range req.Topics {
		name := t.Topic
		if name == "" {
			name = fmt.Sprintf("%x", t.TopicID)
		}
		for _, p := range t.Partitions {
			b := p.Records
			for len(b) >= 61 {
				n := 12 + int(binary.BigEndian.Uint32(b[8:]))
				if n > len(b) {
					break
				}
				cnt := int32(binary.BigEndian.Uint32(b[57:]))
				first := int32(binary.BigEndian.Uint32(b[53:]))
				out = append(out, &produced{
					agent: agent, topic: name, partition: p.Partition, sent: now,
					pid: int64(binary.BigEndian.Uint64(b[43:])), epoch: int16(binary.BigEndian.Uint16(b[51:])),
					first: first, last: first + cnt - 1, cnt: cnt,
				})
				b = b[n:]
			}
		}
	}
	w.mu.Lock()
	w.seen = append(w.seen, out...)
	w.mu.Unlock()
	return out
}

// answer notes a produce answer, and points the broker addresses of a
// Metadata or FindCoordinator answer at agent's listeners.
func (w *wireWatch) answer(agent string, req *request, frame []byte) []byte {
	kreq := kmsg.RequestForKey(req.key)
	if kreq == nil {
		return frame
	}
	kreq.SetVersion(req.version)
	body := frame[8:]
	flexible := kreq.IsFlexible() && req.key != int16(kmsg.ApiVersions)
	if flexible {
		r := kbin.Reader{Src: body}
		kmsg.SkipTags(&r)
		body = r.Src
	}
	resp := kreq.ResponseKind()
	switch req.key {
	case int16(kmsg.Produce), int16(kmsg.Metadata), int16(kmsg.FindCoordinator):
	default:
		return frame
	}
	resp.SetVersion(req.version)
	if err := resp.ReadFrom(body); err != nil {
		w.fail("an answer to %s (key %d v%d) does not decode: %v", agent, req.key, req.version, err)
		return frame
	}
	now := time.Now()
	point := func(host *string, port *int32) {
		a := w.listener(agent, net.JoinHostPort(*host, strconv.Itoa(int(*port))))
		h, p, _ := net.SplitHostPort(a)
		n, _ := strconv.Atoi(p)
		*host, *port = h, int32(n)
	}
	switch resp := resp.(type) {
	case *kmsg.ProduceResponse:
		errs := map[string]int16{}
		for _, t := range resp.Topics {
			name := t.Topic
			if name == "" {
				name = fmt.Sprintf("%x", t.TopicID)
			}
			for _, p := range t.Partitions {
				errs[name+"/"+strconv.Itoa(int(p.Partition))] = p.ErrorCode
			}
		}
		w.mu.Lock()
		for _, p := range req.produced {
			code, ok := errs[p.topic+"/"+strconv.Itoa(int(p.partition))]
			p.answered, p.landed = now, ok && code == 0
		}
		w.mu.Unlock()
		return frame
	case *kmsg.MetadataResponse:
		w.mu.Lock()
		for _, t := range resp.Topics {
			if t.Topic != nil && t.TopicID != [16]byte{} {
				w.names[fmt.Sprintf("%x", t.TopicID)] = *t.Topic
			}
		}
		w.mu.Unlock()
		for i := range resp.Brokers {
			point(&resp.Brokers[i].Host, &resp.Brokers[i].Port)
		}
	case *kmsg.FindCoordinatorResponse:
		if resp.ErrorCode == 0 && resp.Host != "" {
			point(&resp.Host, &resp.Port)
		}
		for i := range resp.Coordinators {
			if c := &resp.Coordinators[i]; c.ErrorCode == 0 && c.Host != "" {
				point(&c.Host, &c.Port)
			}
		}
	}
	out := append([]byte(nil), frame[:8]...)
	if flexible {
		out = append(out, 0)
	}
	out = resp.AppendTo(out)
	binary.BigEndian.PutUint32(out, uint32(len(out)-4))
	return out
}

// stale returns the writes of two agents on one partition of a mirror
// topic (the state topic is every agent's): a produce of one agent in
// flight while another agent's was (sent before that was answered), or,
// with the same producer id, sent after another agent's batch with an epoch
// and sequences not older had landed. It also counts the batches seen and
// the changes of a partition's writer.
func (w *wireWatch) stale() (twice []string, produces, changes int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	by := map[string][]*produced{}
	for _, p := range w.seen {
		topic := p.topic
		if n, ok := w.names[topic]; ok {
			topic = n
		}
		if strings.HasPrefix(topic, "__kmirror_state") {
			continue
		}
		k := topic + "/" + strconv.Itoa(int(p.partition))
		by[k] = append(by[k], p)
	}
	at := func(t time.Time) string { return t.Format("15:04:05.000000") }
	for part, ps := range by {
		slices.SortStableFunc(ps, func(a, b *produced) int { return a.sent.Compare(b.sent) })
		produces += len(ps)
		for i, x := range ps {
			if i > 0 && ps[i-1].agent != x.agent {
				changes++
			}
			for _, y := range ps[:i] {
				if y.agent == x.agent {
					continue
				}
				switch {
				case y.answered.IsZero():
					continue // never answered: its connection broke (counted by check)
				case x.sent.Before(y.answered):
					twice = append(twice, fmt.Sprintf("%s: %s sent %d-%d (producer %d epoch %d) at %s while %s's %d-%d (producer %d epoch %d) sent at %s was in flight",
						part, x.agent, x.first, x.last, x.pid, x.epoch, at(x.sent), y.agent, y.first, y.last, y.pid, y.epoch, at(y.sent)))
				case y.landed && y.pid == x.pid && x.pid >= 0 && (x.epoch < y.epoch || (x.epoch == y.epoch && x.first <= y.last)):
					twice = append(twice, fmt.Sprintf("%s: %s sent %d-%d (producer %d epoch %d) at %s, after %s's %d-%d landed at %s",
						part, x.agent, x.first, x.last, x.pid, x.epoch, at(x.sent), y.agent, y.first, y.last, at(y.answered)))
				default:
					continue
				}
				break
			}
		}
	}
	slices.Sort(twice)
	return twice, produces, changes
}

// check fails t when two agents wrote one partition, and logs what it saw.
func (w *wireWatch) check(t testing.TB) {
	t.Helper()
	twice, produces, changes := w.stale()
	w.mu.Lock()
	if len(w.errs) > 0 {
		t.Errorf("wire watch: %v", w.errs)
	}
	var unanswered int
	for _, p := range w.seen {
		if p.answered.IsZero() {
			unanswered++
		}
	}
	w.mu.Unlock()
	if unanswered > 0 {
		t.Logf("wire watch: %d batches never answered (their connection broke); the check cannot place them", unanswered)
	}
	if len(twice) > 0 {
		t.Errorf("on the wire, %d produce(s) of an agent left after another agent's batch of the same partition had landed (two writers): %v", len(twice), twice[:min(len(twice), 5)])
		return
	}
	if produces == 0 {
		t.Errorf("the wire watch saw no produce request: the agents did not write through it")
		return
	}
	t.Logf("wire watch: %d batches produced, %d changes of a partition's writer, none after another agent's write", produces, changes)
}

// TestWireWatchSeesTwoWriters: the wire watch sees two writers where there
// are two. Two agents of coordination = "single", wrongly started at once
// on one destination and state topic, both mirror the same partitions.
// What else happens varies (the broker may drop one's batches as
// duplicates of the other's, or take them as foreign writes, which fail
// the partition): the test logs it, and asserts only that the watch saw it.
// The watch holds produce answers 200 ms: on loopback the first
// foreign-write answer can fail both agents' partitions before any of their
// writes were in flight at once (seen in CI: 22 batches, none at once),
// and such a quick succession of two writers with their own producer ids
// looks, on the wire, like handoffs.
func TestWireWatchSeesTwoWriters(t *testing.T) {
	forEngines(t, testWireWatchSeesTwoWriters)
}

func testWireWatchSeesTwoWriters(t *testing.T, e engine) {
	p := newPairOn(t, e, pairOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic := p.name("twice")
	createTopic(t, p.srcCl, topic, 2, nil)
	spec := workload.Spec{Topic: topic, Partitions: 2, Seed: 31, Codecs: []string{workload.CodecZstd}}
	stopProducing := runProducers(ctx, t, p.src, []workload.Spec{spec}, 500, 50)
	defer stopProducing()
	w := newWireWatch(t)
	w.hold = 200 * time.Millisecond
	ms := []agentMirror{{Name: "twice", Source: p.src, Topics: []string{topic}}}
	var agents []*agentProcess
	for _, id := range []string{"s0", "s1"} {
		setup := writeAgentConfigTo(t, w.bootstrap(id, p.dst.Bootstrap()), p.stateTopicHCL()+fmt.Sprintf("agent_id = %q\ncoordination = \"single\"\n", id), ms...)
		agents = append(agents, startAgentProcess(t, setup, id))
	}
	// Both agents write what the source gains, until the watch sees it.
	twice, produces, _ := w.stale()
	for deadline := time.Now().Add(time.Minute); len(twice) == 0 && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		twice, produces, _ = w.stale()
	}
	if len(twice) == 0 {
		t.Fatalf("two agents wrote the same partitions, and the wire watch saw nothing in %d batches", produces)
	}
	t.Logf("the wire watch saw %d writes of two agents in %d batches, such as %s", len(twice), produces, twice[0])
	for _, a := range agents {
		if list, err := a.api.Describe(ctx); err == nil {
			for _, part := range describedPartitions(list) {
				t.Logf("%s: %s/%d %s %s", a.name, part.Topic, part.Partition, part.State, part.Reason)
			}
		}
	}
}

// TestWireWatchStale: the two kinds of two writers are found, and the
// writes of one agent after another's have returned (a handoff, a crash)
// are not.
func TestWireWatchStale(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	batch := func(agent string, sent, answered int, landed bool, epoch int16, first, last int32) *produced {
		p := &produced{agent: agent, topic: "t", partition: 0, sent: at(sent), landed: landed, pid: 7, epoch: epoch, first: first, last: last}
		if answered > 0 {
			p.answered = at(answered)
		}
		return p
	}
	for _, c := range []struct {
		name  string
		seen  []*produced
		twice int
	}{
		{"a handoff: b writes after a's last batch returned", []*produced{
			batch("a", 1, 5, true, 0, 0, 9), batch("a", 6, 9, true, 0, 10, 19), batch("b", 20, 25, true, 0, 20, 29)}, 0},
		{"a crash: b rewrites what a sent and the broker refused", []*produced{
			batch("a", 1, 5, true, 0, 0, 9), batch("a", 6, 9, false, 0, 10, 19), batch("b", 20, 25, true, 0, 10, 19)}, 0},
		{"a new epoch after another agent's", []*produced{
			batch("a", 1, 5, true, 1, 0, 9), batch("b", 20, 25, true, 2, 0, 9)}, 0},
		{"in flight at once", []*produced{
			batch("a", 1, 10, true, 0, 0, 9), batch("b", 5, 12, true, 0, 0, 9)}, 1},
		{"a late batch after another agent's landed", []*produced{
			batch("b", 1, 5, true, 0, 10, 19), batch("a", 8, 12, false, 0, 10, 19)}, 1},
		{"an older epoch after another agent's landed", []*produced{
			batch("b", 1, 5, true, 2, 0, 9), batch("a", 8, 12, false, 1, 30, 39)}, 1},
		{"the state topic is every agent's", []*produced{
			{agent: "a", topic: "__kmirror_state-x", sent: at(1), answered: at(10), landed: true, pid: 1},
			{agent: "b", topic: "__kmirror_state-x", sent: at(5), answered: at(12), landed: true, pid: 2}}, 0},
	} {
		w := &wireWatch{seen: c.seen, names: map[string]string{}}
		if twice, _, _ := w.stale(); len(twice) != c.twice {
			t.Errorf("%s: %d two-writer findings %v, want %d", c.name, len(twice), twice, c.twice)
		}
	}
}
