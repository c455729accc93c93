package netshape

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// The tests assert bounds that shaping guarantees whatever the machine's
// load: a round trip never takes less than twice the delay, and n bytes never
// cross faster than the bandwidth allows. Upper bounds are only ever a
// multiple of what the shape implies, or a ratio that a serialized link
// could not reach by an order of magnitude, so that a busy 2-core machine
// does not fail them.

// echo serves ln, writing back everything a connection sends and closing it
// at the client's end of stream.
func echo(t *testing.T, ln net.Listener) {
	t.Helper()
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// modes runs fn with the address of an echo server behind l: once with the
// server accepting through l.Listener (an in-process server such as kfake),
// once through a Proxy to a plain echo server (a broker JVM).
func modes(t *testing.T, s Shape, fn func(t *testing.T, l *Link, addr string)) {
	t.Run("listener", func(t *testing.T) {
		l := NewLink(s)
		ln := l.Listener(listen(t))
		echo(t, ln)
		fn(t, l, ln.Addr().String())
	})
	t.Run("proxy", func(t *testing.T) {
		l := NewLink(s)
		target := listen(t)
		echo(t, target)
		p := l.Proxy(listen(t), target.Addr().String())
		t.Cleanup(func() { p.Close() })
		fn(t, l, p.Addr().String())
	})
}

func dial(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	// A hung test fails on the deadline instead of at the go test timeout.
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	return c.(*net.TCPConn)
}

// roundTrip writes msg and reads its echo, returning how long that took.
func roundTrip(t *testing.T, c net.Conn, msg []byte) time.Duration {
	t.Helper()
	start := time.Now()
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatalf("echo = %q, want %q", got, msg)
	}
	return time.Since(start)
}

// exchange writes payload times times on each of cs at once while reading
// the echoes back, and returns how long that took.
func exchange(t *testing.T, cs []net.Conn, payload []byte, times int) time.Duration {
	t.Helper()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 2*len(cs))
	for _, c := range cs {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for range times {
				if _, err := c.Write(payload); err != nil {
					errs <- err
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			if _, err := io.ReadFull(c, make([]byte, times*len(payload))); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return elapsed
}

func TestRoundTripTakesTwiceTheDelay(t *testing.T) {
	const delay = 20 * time.Millisecond
	modes(t, Shape{Delay: delay}, func(t *testing.T, _ *Link, addr string) {
		c := dial(t, addr)
		for i := range 5 {
			if rtt := roundTrip(t, c, []byte("ping")); rtt < 2*delay {
				t.Fatalf("round trip %d took %s, less than twice the %s one-way delay", i, rtt, delay)
			}
		}
	})
}

// TestBytesIntact sends more than a Window each way through a delayed link,
// then half-closes: the echo comes back whole and in order, then EOF.
func TestBytesIntact(t *testing.T) {
	modes(t, Shape{Delay: 2 * time.Millisecond}, func(t *testing.T, _ *Link, addr string) {
		c := dial(t, addr)
		data := make([]byte, 3*Window+12345)
		if _, err := rand.Read(data); err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() {
			// Odd write sizes, so that chunks do not line up with writes.
			var err error
			for rest := data; len(rest) > 0 && err == nil; {
				n := min(len(rest), 99991)
				_, err = c.Write(rest[:n])
				rest = rest[n:]
			}
			if err == nil {
				err = c.CloseWrite()
			}
			errc <- err
		}()
		got, err := io.ReadAll(c)
		if err != nil {
			t.Fatalf("reading the echo: %v", err)
		}
		if err := <-errc; err != nil {
			t.Fatalf("writing: %v", err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("echo of %d bytes differs (got %d bytes)", len(data), len(got))
		}
	})
}

// TestManyInFlight pipelines requests on one connection and on several at
// once: a link that carried one request per round trip would take n round
// trips; a pipe takes about one.
func TestManyInFlight(t *testing.T) {
	const (
		delay = 50 * time.Millisecond
		n     = 200 // requests per connection
		conns = 4
	)
	modes(t, Shape{Delay: delay}, func(t *testing.T, _ *Link, addr string) {
		cs := make([]net.Conn, conns)
		for i := range cs {
			cs[i] = dial(t, addr)
			roundTrip(t, cs[i], []byte("warm")) // connected through the proxy
		}
		elapsed := exchange(t, cs, bytes.Repeat([]byte("r"), 100), n)
		serial := n * 2 * delay // one request per round trip, per connection
		t.Logf("%d connections × %d requests in flight: %s (one per round trip would take %s per connection)", conns, n, elapsed, serial)
		if elapsed < 2*delay {
			t.Fatalf("%d round trips took %s, less than one round trip (%s)", n, elapsed, 2*delay)
		}
		if elapsed > serial/10 {
			t.Fatalf("%d pipelined requests took %s, more than a tenth of %s (one request per round trip)", n, elapsed, serial)
		}
	})
}

// TestBandwidthShared sends through two connections at once: together they
// get the link's rate, not each.
func TestBandwidthShared(t *testing.T) {
	const (
		rate  = 4 << 20 // bytes per second, each direction
		each  = 2 << 20 // bytes per connection
		conns = 2
	)
	modes(t, Shape{Bandwidth: rate}, func(t *testing.T, _ *Link, addr string) {
		elapsed := exchange(t, []net.Conn{dial(t, addr), dial(t, addr)}, make([]byte, each), 1)
		// The client-to-server direction alone needs total/rate: the
		// link's clock starts after start, so this bound is exact.
		least := time.Duration(float64(conns*each) / rate * float64(time.Second))
		t.Logf("%d bytes each way over %d connections at %s: %s (at least %s)", conns*each, conns, FormatBandwidth(rate), elapsed, least)
		if elapsed < least {
			t.Fatalf("%d bytes crossed in %s, faster than %s allows (%s)", conns*each, elapsed, FormatBandwidth(rate), least)
		}
		if elapsed > 5*least {
			t.Fatalf("%d bytes took %s, more than 5 times what %s allows (%s)", conns*each, elapsed, FormatBandwidth(rate), least)
		}
	})
}

// TestSetShape changes the delay of a link with an open connection: the
// connection's next round trip takes the new delay.
func TestSetShape(t *testing.T) {
	const delay = 30 * time.Millisecond
	modes(t, Shape{}, func(t *testing.T, l *Link, addr string) {
		c := dial(t, addr)
		roundTrip(t, c, []byte("before"))
		l.SetShape(Shape{Delay: delay})
		if got := l.Shape(); got.Delay != delay {
			t.Fatalf("Shape() = %v after SetShape", got)
		}
		if rtt := roundTrip(t, c, []byte("after")); rtt < 2*delay {
			t.Fatalf("round trip after SetShape took %s, less than twice the new %s delay", rtt, delay)
		}
	})
}

// TestCloseSendsWhatWasWritten: a server that writes and closes at once
// still gets its bytes to the client, then EOF.
func TestCloseSendsWhatWasWritten(t *testing.T) {
	l := NewLink(Shape{Delay: 10 * time.Millisecond})
	ln := l.Listener(listen(t))
	t.Cleanup(func() { ln.Close() })
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_, _ = c.Write(data)
		c.Close()
	}()
	c := dial(t, ln.Addr().String())
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes, want the %d written before Close", len(got), len(data))
	}
}

func TestServerDeadlines(t *testing.T) {
	l := NewLink(Shape{Delay: time.Millisecond})
	ln := l.Listener(listen(t))
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	dial(t, ln.Addr().String())
	sc := <-accepted
	defer sc.Close()
	if err := sc.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past its deadline = %v, want os.ErrDeadlineExceeded", err)
	}
	sc.Close()
	if _, err := sc.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read after Close = %v, want net.ErrClosed", err)
	}
	if _, err := sc.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write after Close = %v, want net.ErrClosed", err)
	}
}

// TestProxyTargetDown: a client of a proxy whose target refuses sees its
// connection end, as a refused one.
func TestProxyTargetDown(t *testing.T) {
	gone := listen(t)
	addr := gone.Addr().String()
	gone.Close()
	p := NewLink(Shape{}).Proxy(listen(t), addr)
	t.Cleanup(func() { p.Close() })
	c := dial(t, p.Addr().String())
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatalf("read %d bytes through a proxy whose target is down", n)
	}
}

// TestProxyClose ends the connections it forwards.
func TestProxyClose(t *testing.T) {
	target := listen(t)
	echo(t, target)
	p := NewLink(Shape{Delay: time.Millisecond}).Proxy(listen(t), target.Addr().String())
	c := dial(t, p.Addr().String())
	roundTrip(t, c, []byte("up"))
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("a forwarded connection stayed open after Close")
	}
}

func TestParseBandwidth(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"1000", 1000},
		{"100MB", 100e6},
		{"100MB/s", 100e6},
		{"12.5MB", 12.5e6},
		{"1GB", 1e9},
		{"64KiB", 64 << 10},
		{"2MiB/s", 2 << 20},
		{"1 GiB", 1 << 30},
		{"10B", 10},
	} {
		got, err := ParseBandwidth(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseBandwidth(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
		if tc.want > 0 {
			if back, err := ParseBandwidth(FormatBandwidth(tc.want)); err != nil || back != tc.want {
				t.Errorf("ParseBandwidth(FormatBandwidth(%d) = %q) = %d, %v", tc.want, FormatBandwidth(tc.want), back, err)
			}
		}
	}
	for _, bad := range []string{"", "MB", "fast", "10Mb", "-1MB", "0.1B", "1e30GB"} {
		if got, err := ParseBandwidth(bad); err == nil {
			t.Errorf("ParseBandwidth(%q) = %d, want an error", bad, got)
		}
	}
}

func TestShapeString(t *testing.T) {
	for s, want := range map[Shape]string{
		{}:                                 "unshaped",
		{Delay: 25 * time.Millisecond}:     "25ms one-way",
		{Bandwidth: 100e6}:                 "100MB/s",
		{Delay: time.Second, Bandwidth: 1}: "1s one-way, 1B/s",
	} {
		if got := s.String(); got != want {
			t.Errorf("%#v.String() = %q, want %q", s, got, want)
		}
	}
}
