package mirrorapi

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/kmirror/kmirror/internal/mirrorspec"
)

// AllPartitions is the Throttle.Partitions entry that throttles every
// partition of the mirror.
const AllPartitions = "*"

// ParseThrottlePartition reads one Throttle.Partitions entry: "*" (all is
// true) or "topic:partition". The error names the entry and the fix.
func ParseThrottlePartition(s string) (topic string, partition int32, all bool, err error) {
	if s == AllPartitions {
		return "", 0, true, nil
	}
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return "", 0, false, fmt.Errorf("%q: use TOPIC:PARTITION (such as orders:0) or %q for every partition", s, AllPartitions)
	}
	topic, num := s[:i], s[i+1:]
	if err := mirrorspec.CheckKafkaTopicName(topic); err != nil {
		return "", 0, false, fmt.Errorf("%q: %w", s, err)
	}
	n, perr := strconv.ParseInt(num, 10, 32)
	if perr != nil || n < 0 {
		return "", 0, false, fmt.Errorf("%q: partition %q is not a number from 0 up", s, num)
	}
	return topic, int32(n), false, nil
}

// Validate says what is wrong with a throttle, naming the field and the
// entry at fault.
func (t Throttle) Validate() error {
	var errs []error
	if t.RateBytesPerSecond <= 0 {
		errs = append(errs, fmt.Errorf("rate_bytes_per_second: %d; give a ceiling above 0 bytes per second (remove the throttle to lift it)", t.RateBytesPerSecond))
	}
	seen := map[string]bool{}
	for i, p := range t.Partitions {
		if _, _, _, err := ParseThrottlePartition(p); err != nil {
			errs = append(errs, fmt.Errorf("partitions[%d]: %w", i, err))
			continue
		}
		if seen[p] {
			errs = append(errs, fmt.Errorf("partitions[%d]: %q is listed twice", i, p))
		}
		seen[p] = true
	}
	if seen[AllPartitions] && len(t.Partitions) > 1 {
		errs = append(errs, fmt.Errorf("partitions: %q already covers every partition; list it alone", AllPartitions))
	}
	return errors.Join(errs...)
}

// Normalized returns t with an empty partition list spelled ["*"].
func (t Throttle) Normalized() Throttle {
	if len(t.Partitions) == 0 {
		t.Partitions = []string{AllPartitions}
	}
	return t
}
