// Package netshape makes loopback connections behave like a wide-area link,
// for tests and benchmarks: every byte becomes readable at the far end a
// one-way delay after it was written, and each direction of the link carries
// at most a given number of bytes per second, shared by all the connections
// that cross it.
//
// The link is modelled as a pipe, not as a per-request sleep: bytes enter it
// as they are written and leave it in order, each chunk once the link has
// had time to send it (bandwidth, a token bucket with no burst: a shared
// clock of when the link is next free) and then Delay later. A client with
// many requests in flight therefore gets the bandwidth-delay product, as it
// would on a real link, and one with a single request in flight gets one
// request per round trip. Each connection holds at most Window bytes in
// flight per direction; a writer blocks beyond that, as it would once the
// socket buffers of a real connection are full.
//
// A Link shapes the connections a server accepts (Listener, for servers in
// this process such as kfake) or the connections a Proxy forwards to a server
// elsewhere (Apache Kafka brokers in their own JVMs).
package netshape

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Window is the most bytes one connection holds in flight in one direction,
// written but not yet read: 4 MiB, Linux's default ceiling for a TCP send
// buffer (net.ipv4.tcp_wmem). One connection thus carries at most Window per
// one-way delay, about 168 MB/s at 25 ms: more than the benchmarks reach on
// one machine, so that they measure the link and the clients, not this
// window. (TCP frees its window when the acknowledgement is back, a round
// trip, not a one-way delay, after sending; the same window there gives
// half.)
const Window = 4 << 20

// chunkSize bounds the bytes that move through a link as one unit: at
// 100 MB/s a chunk takes 0.6 ms to send, fine enough that a reader sees a
// stream rather than bursts.
const chunkSize = 64 << 10

// Shape is what a link does to the bytes it carries, the same in each
// direction.
type Shape struct {
	// Delay is the one-way delay: bytes written at one end become
	// readable at the other Delay after they were sent. A round trip
	// takes twice Delay.
	Delay time.Duration
	// Bandwidth is the link's rate in bytes per second in each direction,
	// shared by all the connections through it; 0 is unlimited.
	Bandwidth int64
}

// IsZero says whether s leaves bytes alone.
func (s Shape) IsZero() bool { return s.Delay == 0 && s.Bandwidth == 0 }

func (s Shape) String() string {
	if s.IsZero() {
		return "unshaped"
	}
	var parts []string
	if s.Delay > 0 {
		parts = append(parts, s.Delay.String()+" one-way")
	}
	if s.Bandwidth > 0 {
		parts = append(parts, FormatBandwidth(s.Bandwidth))
	}
	return strings.Join(parts, ", ")
}

// Link is a shaped link between clients and servers. Its shape can change
// while connections cross it; the change applies to bytes written after it.
// A Link is safe for concurrent use.
type Link struct {
	shape    atomic.Pointer[Shape]
	up, down direction // client to server, server to client
}

// NewLink returns a link of shape s.
func NewLink(s Shape) *Link {
	l := &Link{}
	l.SetShape(s)
	return l
}

// Shape returns the link's shape.
func (l *Link) Shape() Shape { return *l.shape.Load() }

// SetShape changes the link's shape. Bytes already in the link keep the
// times they were given.
func (l *Link) SetShape(s Shape) {
	s.Delay = max(s.Delay, 0)
	s.Bandwidth = max(s.Bandwidth, 0)
	l.shape.Store(&s)
}

// direction is the state one direction of a link shares among its
// connections: the clock of when the link is next free to send.
type direction struct {
	mu   sync.Mutex
	free time.Time
}

// due returns when n bytes written now become readable at the far end: once
// the link has sent them, after whatever it still has to send, and then the
// delay.
func (d *direction) due(s Shape, n int) time.Time {
	now := time.Now()
	if s.Bandwidth == 0 {
		return now.Add(s.Delay)
	}
	d.mu.Lock()
	start := now
	if d.free.After(now) {
		start = d.free
	}
	d.free = start.Add(time.Duration(float64(n) / float64(s.Bandwidth) * float64(time.Second)))
	sent := d.free
	d.mu.Unlock()
	return sent.Add(s.Delay)
}

// ParseBandwidth parses a rate in bytes per second: a number with an
// optional unit, B, KB, MB, GB (powers of 1000) or KiB, MiB, GiB (powers of
// 1024), and an optional "/s": "100MB", "12.5MB/s", "512KiB", "1000000".
// "0" is unlimited.
func ParseBandwidth(s string) (int64, error) {
	v := strings.TrimSuffix(strings.TrimSpace(s), "/s")
	i := strings.IndexFunc(v, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := v, ""
	if i >= 0 {
		num, unit = v[:i], strings.TrimSpace(v[i:])
	}
	mult, ok := map[string]float64{
		"": 1, "B": 1,
		"KB": 1e3, "MB": 1e6, "GB": 1e9,
		"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30,
	}[unit]
	if !ok {
		return 0, fmt.Errorf("bandwidth %q: unit %q is not one of B, KB, MB, GB, KiB, MiB, GiB", s, unit)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || num == "" {
		return 0, fmt.Errorf("bandwidth %q: want a number of bytes per second with an optional unit, such as 100MB", s)
	}
	b := f * mult
	if b > math.MaxInt64/2 {
		return 0, fmt.Errorf("bandwidth %q is too large", s)
	}
	if b > 0 && b < 1 {
		return 0, fmt.Errorf("bandwidth %q is less than one byte per second", s)
	}
	return int64(math.Round(b)), nil
}

// FormatBandwidth formats bytes per second the way ParseBandwidth reads
// them, in the largest decimal unit that keeps a whole number where it can.
func FormatBandwidth(b int64) string {
	if b == 0 {
		return "unlimited"
	}
	for _, u := range []struct {
		name string
		v    int64
	}{{"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}} {
		if b >= u.v {
			return strconv.FormatFloat(float64(b)/float64(u.v), 'f', -1, 64) + u.name + "/s"
		}
	}
	return strconv.FormatInt(b, 10) + "B/s"
}
