package mirrorapi

import (
	"strings"
	"testing"
)

func TestParseThrottlePartition(t *testing.T) {
	for _, c := range []struct {
		in        string
		topic     string
		partition int32
		all       bool
		err       string // part of the error; empty: valid
	}{
		{in: "*", all: true},
		{in: "orders:0", topic: "orders"},
		{in: "my.topic-1_x:12", topic: "my.topic-1_x", partition: 12},
		{in: "a:b:3", err: `"a:b" is not a valid Kafka topic name`},
		{in: "orders", err: "use TOPIC:PARTITION"},
		{in: "orders:", err: `partition "" is not a number`},
		{in: "orders:-1", err: `partition "-1" is not a number`},
		{in: "orders:x", err: `partition "x" is not a number`},
		{in: "orders:99999999999", err: "is not a number"},
		{in: ":0", err: `"" is not a valid Kafka topic name`},
		{in: "..:0", err: "not a valid Kafka topic name"},
		{in: "**", err: "use TOPIC:PARTITION"},
	} {
		topic, part, all, err := ParseThrottlePartition(c.in)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%q: %v", c.in, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%q: error %v, want one saying %q", c.in, err, c.err)
		case c.err == "" && (topic != c.topic || part != c.partition || all != c.all):
			t.Errorf("%q: %q %d %v, want %q %d %v", c.in, topic, part, all, c.topic, c.partition, c.all)
		}
	}
}

func TestThrottleValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		t    Throttle
		errs []string // parts of the error; none: valid
	}{
		{name: "all by default", t: Throttle{RateBytesPerSecond: 1}},
		{name: "listed", t: Throttle{RateBytesPerSecond: 1 << 20, Partitions: []string{"a:0", "a:1", "b:0"}, SourceQuota: true}},
		{name: "star", t: Throttle{RateBytesPerSecond: 5, Partitions: []string{"*"}}},
		{name: "zero rate", t: Throttle{}, errs: []string{"rate_bytes_per_second: 0"}},
		{name: "negative rate and bad entry", t: Throttle{RateBytesPerSecond: -1, Partitions: []string{"a:0", "a"}},
			errs: []string{"rate_bytes_per_second: -1", `partitions[1]: "a"`}},
		{name: "twice", t: Throttle{RateBytesPerSecond: 1, Partitions: []string{"a:0", "a:0"}}, errs: []string{`partitions[1]: "a:0" is listed twice`}},
		{name: "star and more", t: Throttle{RateBytesPerSecond: 1, Partitions: []string{"*", "a:0"}}, errs: []string{"list it alone"}},
	} {
		err := c.t.Validate()
		if len(c.errs) == 0 {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: valid, want errors %q", c.name, c.errs)
			continue
		}
		for _, e := range c.errs {
			if !strings.Contains(err.Error(), e) {
				t.Errorf("%s: %v, want it to say %q", c.name, err, e)
			}
		}
	}
	if got := (Throttle{RateBytesPerSecond: 1}).Normalized().Partitions; len(got) != 1 || got[0] != AllPartitions {
		t.Errorf("Normalized partitions: %q", got)
	}
}
