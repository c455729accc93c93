package devcluster

import (
	"encoding/binary"
	"math"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// kfake stops filling a Fetch answer once it holds the request's MaxBytes,
// and when that happens inside a partition it leaves out the aborted
// transactions of the batches it did return for that partition
// (01_fetch.go: `break full` skips the partition's lookup). A read_committed
// client then takes aborted records for committed ones: the agent mirrored
// them as visible data. Apache Kafka computes the list for whatever it
// returns.
//
// So kfake answers a read_committed Fetch whole: the control below raises
// the request's MaxBytes before kfake reads it, and compatConn, which kept
// the request as the client sent it, cuts the answer as kfake (and Kafka)
// would have: batches in the answer's order while they fit the client's
// MaxBytes, the answer's first batch whatever its size, nothing after the
// first batch that does not fit. Each partition keeps the aborted
// transactions up to the end of the batches it keeps. The partitions after
// the cut stay in the answer without records, as Kafka sends them (kfake
// leaves them out).

// installFetchCut registers the control. It only changes requests, so the
// controls a test adds later see every Fetch, with the raised MaxBytes.
func installFetchCut(kc *kfake.Cluster) {
	kc.ControlKey(int16(kmsg.Fetch), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		if req, ok := kreq.(*kmsg.FetchRequest); ok && cuts(req) {
			req.MaxBytes = math.MaxInt32
		}
		return nil, nil, false
	})
}

// cuts says whether the answer to req is cut here: a read_committed Fetch
// with a MaxBytes to keep.
func cuts(req *kmsg.FetchRequest) bool {
	return req.Version >= 4 && req.IsolationLevel == 1 && req.MaxBytes > 0 && req.MaxBytes < math.MaxInt32
}

// cutFetch cuts resp, kfake's whole answer to req as the client sent it, to
// req.MaxBytes; it says whether it changed anything.
func cutFetch(req *kmsg.FetchRequest, resp *kmsg.FetchResponse) bool {
	if !cuts(req) {
		return false
	}
	var total int64
	var kept, full, changed bool
	for i := range resp.Topics {
		for j := range resp.Topics[i].Partitions {
			p := &resp.Topics[i].Partitions[j]
			if full {
				changed = changed || len(p.RecordBatches) > 0 || len(p.AbortedTransactions) > 0
				p.RecordBatches, p.AbortedTransactions = nil, nil
				continue
			}
			b := p.RecordBatches
			end, upper := 0, int64(-1) // bytes kept; the offset after the last batch kept
			for end+12 <= len(b) {
				size := 12 + int(int32(binary.BigEndian.Uint32(b[end+8:])))
				if size < 12 || end+size > len(b) {
					break // not a whole batch: kfake sends none such
				}
				if total+int64(size) > int64(req.MaxBytes) && kept {
					full = true
					break
				}
				total += int64(size)
				kept = true
				if size >= 27 {
					upper = int64(binary.BigEndian.Uint64(b[end:])) + int64(int32(binary.BigEndian.Uint32(b[end+23:]))) + 1
				}
				end += size
			}
			if !full || end == len(b) {
				continue
			}
			changed = true
			if end == 0 {
				p.RecordBatches, p.AbortedTransactions = nil, nil
				continue
			}
			p.RecordBatches = b[:end]
			var ats []kmsg.FetchResponseTopicPartitionAbortedTransaction
			for _, at := range p.AbortedTransactions {
				if at.FirstOffset < upper {
					ats = append(ats, at)
				}
			}
			p.AbortedTransactions = ats
		}
	}
	return changed
}
