package devcluster

import (
	"encoding/binary"
	"net"
	"sync"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// kfake leaves a few fields of its answers as Apache Kafka never does, and
// Apache Kafka's Java admin client refuses them, which stops Kafka Connect,
// and so MirrorMaker 2, at its first topic:
//
//   - CreateTopics v5+ lists the new topics' configs (KIP-525) with the
//     source unset, -1: "id should be positive" (ConfigSource.forId). Kafka
//     gives DYNAMIC_TOPIC_CONFIG for a config the request set and
//     DEFAULT_CONFIG for the others.
//   - DescribeTopicPartitions leaves a partition's eligible leader replicas
//     (KIP-966) null where Kafka sends an empty list: a
//     NullPointerException in DescribeTopicPartitionsResponse.
//
// A control can only answer a request or pass it on, never amend kfake's
// answer, so the answers are patched on the wire: compatConn sits between
// kfake and the client's connection (above TLS, which devcluster serves
// itself for this), notes the requests whose answers need it as they are
// read, and re-encodes those answers as they are written, with only the
// fields above changed. It also cuts read_committed Fetch answers
// (fetchcut.go).

// compatListener wraps the connections kfake accepts in compatConn.
type compatListener struct{ net.Listener }

func (l compatListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &compatConn{Conn: c, pending: map[int32][]byte{}}, nil
}

// patchedKeys are the requests whose answers compatConn patches.
var patchedKeys = map[int16]bool{
	int16(kmsg.Fetch):                   true,
	int16(kmsg.CreateTopics):            true,
	int16(kmsg.DescribeTopicPartitions): true,
}

type compatConn struct {
	net.Conn

	// Read side, only ever touched by kfake's reading goroutine: where in
	// the request stream the connection is.
	head  [4]byte // the size of the next request, as read so far
	nhead int
	left  int    // bytes of the current request not read yet
	keep  []byte // the current request, when its answer needs patching
	body  []byte // the current request's first 8 bytes: key, version, correlation id

	mu      sync.Mutex
	pending map[int32][]byte // correlation id: the request whose answer to patch
}

func (c *compatConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.scan(p[:n])
	return n, err
}

// scan follows the request stream, keeping each request whose key is in
// patchedKeys whole, by its correlation id.
func (c *compatConn) scan(b []byte) {
	for len(b) > 0 {
		if c.left == 0 { // between requests: reading a size
			k := copy(c.head[c.nhead:], b)
			c.nhead, b = c.nhead+k, b[k:]
			if c.nhead < 4 {
				return
			}
			c.nhead = 0
			c.left = int(binary.BigEndian.Uint32(c.head[:]))
			c.body, c.keep = c.body[:0], nil
			continue
		}
		k := min(len(b), c.left)
		chunk := b[:k]
		b, c.left = b[k:], c.left-k
		if c.keep == nil && len(c.body) < 8 { // key (2), version (2), correlation id (4)
			n := min(8-len(c.body), len(chunk))
			c.body, chunk = append(c.body, chunk[:n]...), chunk[n:]
			if len(c.body) == 8 && patchedKeys[int16(binary.BigEndian.Uint16(c.body))] {
				c.keep = append([]byte(nil), c.body...)
			}
		}
		if c.keep != nil {
			c.keep = append(c.keep, chunk...)
		}
		if c.left == 0 && c.keep != nil {
			corr := int32(binary.BigEndian.Uint32(c.keep[4:8]))
			c.mu.Lock()
			c.pending[corr] = c.keep
			c.mu.Unlock()
			c.keep = nil
		}
	}
}

// Write patches an answer to a noted request. kfake writes each answer
// whole in one Write (clientConn.write), which is what this relies on: a
// Write that is not one whole answer passes as it is.
func (c *compatConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	var req []byte
	if len(c.pending) > 0 && len(p) >= 8 && int(binary.BigEndian.Uint32(p))+4 == len(p) {
		corr := int32(binary.BigEndian.Uint32(p[4:8]))
		if req = c.pending[corr]; req != nil {
			delete(c.pending, corr)
		}
	}
	c.mu.Unlock()
	if req == nil {
		return c.Conn.Write(p)
	}
	out, ok := patchAnswer(req, p)
	if !ok {
		return c.Conn.Write(p)
	}
	if _, err := c.Conn.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// patchAnswer decodes the answer frame to request req (a whole request
// body), patches it, and encodes it again as kfake does; false if either
// does not decode, and the answer then goes out as it is.
func patchAnswer(req, frame []byte) ([]byte, bool) {
	r := kbin.Reader{Src: req}
	key, version := r.Int16(), r.Int16()
	r.Int32()          // correlation id
	r.NullableString() // client id
	kreq := kmsg.RequestForKey(key)
	kreq.SetVersion(version)
	if kreq.IsFlexible() {
		kmsg.SkipTags(&r)
	}
	if err := kreq.ReadFrom(r.Src); err != nil {
		return nil, false
	}
	body := frame[8:]
	if kreq.IsFlexible() {
		if len(body) == 0 || body[0] != 0 { // kfake sends no header tags
			return nil, false
		}
		body = body[1:]
	}
	kresp := kreq.ResponseKind()
	kresp.SetVersion(version)
	if err := kresp.ReadFrom(body); err != nil {
		return nil, false
	}
	switch resp := kresp.(type) {
	case *kmsg.FetchResponse:
		if !cutFetch(kreq.(*kmsg.FetchRequest), resp) {
			return nil, false
		}
	case *kmsg.CreateTopicsResponse:
		set := map[string]map[string]bool{}
		for _, t := range kreq.(*kmsg.CreateTopicsRequest).Topics {
			set[t.Topic] = map[string]bool{}
			for _, c := range t.Configs {
				set[t.Topic][c.Name] = true
			}
		}
		for i := range resp.Topics {
			t := &resp.Topics[i]
			for j := range t.Configs {
				if c := &t.Configs[j]; c.Source < 0 {
					c.Source = int8(kmsg.ConfigSourceDefaultConfig)
					if set[t.Topic][c.Name] {
						c.Source = int8(kmsg.ConfigSourceDynamicTopicConfig)
					}
				}
			}
		}
	case *kmsg.DescribeTopicPartitionsResponse:
		for i := range resp.Topics {
			for j := range resp.Topics[i].Partitions {
				p := &resp.Topics[i].Partitions[j]
				if p.EligibleLeaderReplicas == nil {
					p.EligibleLeaderReplicas = []int32{}
				}
				if p.LastKnownELR == nil {
					p.LastKnownELR = []int32{}
				}
			}
		}
	}
	out := append([]byte(nil), frame[:8]...)
	if kreq.IsFlexible() {
		out = append(out, 0)
	}
	out = kresp.AppendTo(out)
	binary.BigEndian.PutUint32(out, uint32(len(out)-4))
	return out, true
}
