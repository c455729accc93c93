package devcluster

import (
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The strict layer makes kfake refuse what Apache Kafka's broker refuses
// (DESIGN §7; design-review §1.5, §1.6, §3), with Kafka's error codes and
// messages. On Produce, in Kafka's order:
//
//   - the records field: no batch or a second batch, magic other than 2
//     (INVALID_RECORD); a length or magic the batch iterator cannot read
//     (CORRUPT_MESSAGE); zstd below Produce v7 (UNSUPPORTED_COMPRESSION_TYPE);
//   - whole request: transactional batches without a transactional id
//     (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), or of two (producer id,
//     epoch) pairs (INVALID_PRODUCER_ID_MAPPING);
//   - per partition, on its leader: base offset not 0 (INVALID_RECORD); batch
//     above max.message.bytes (MESSAGE_TOO_LARGE); bad CRC (CORRUPT_MESSAGE);
//     lastOffsetDelta+1 not the record count, a count that is not the
//     number of records encoded, a control batch, a producer id with a
//     negative sequence (INVALID_RECORD); a keyless record on a topic whose
//     cleanup.policy has compact (INVALID_RECORD); on CreateTime topics a
//     record timestamp outside [now-before.max.ms, now+after.max.ms], and the
//     LogAppendTime bit where the topic is LogAppendTime or the timestamp is
//     -1 (INVALID_TIMESTAMP); a compressed batch whose inner offset deltas
//     are not 0..n-1 (UNKNOWN_SERVER_ERROR, see checkBatch); a batch above
//     segment.bytes (RECORD_LIST_TOO_LARGE). An uncompressed batch with such
//     deltas is accepted and kept as is, as Kafka does.
//
// Each code comes with Kafka's ErrorMessage, which is none except for the
// per-record errors (keys and timestamps): Kafka only sends the message of a
// RecordValidationException (ReplicaManager.appendToLocalLog,
// hasCustomErrorMessage).
//
// On DeleteRecords: a topic whose cleanup.policy lacks delete
// (POLICY_VIOLATION). Topic configs are read live from kfake
// (Cluster.TopicInfo) on every request, so a config altered through the
// protocol applies to the very next request.
//
// How a partition is refused without refusing the whole request: kfake's
// Control hooks can only answer a whole request or pass it on, and cannot
// see or amend kfake's own response. But a control runs on the cluster
// goroutine just before kfake looks up the faults for that same request, and
// kfake checks faults per partition before it does any work on a partition.
// So for each partition we refuse, the control installs a one-shot kfake
// Fault selecting exactly that topic and partition on this broker, whose When
// matches only this request (by pointer identity). kfake then answers that
// partition with our error and handles every other partition itself, in the
// same response. The refused partition's entry in the request is also
// disarmed (see rejection.disarm), because a fault a test installed earlier
// takes precedence over ours and may let kfake go on to the append. Checks
// Kafka applies to the whole request answer it from the control.

// pendingFaultTTL bounds how long a fault installed for one request may wait
// to be hit. A fault is hit while kfake handles the request, right after our
// control returns, and then removes itself; one is left behind only when
// something answered the request before kfake reached the partition (an ACL
// denial, a topic-level fault, a later control). Such leftovers match nothing
// (their When matches a finished request) and are swept after this long. The
// value only has to outlast a request parked by a test's SleepControl.
const pendingFaultTTL = 5 * time.Minute

// strictValidator holds the controls' state.
type strictValidator struct {
	kc     *kfake.Cluster
	log    hclog.Logger
	broker map[string]string // broker-level defaults given at Start
	now    func() time.Time

	mu      sync.Mutex
	pending []pendingFault
}

type pendingFault struct {
	h  *kfake.FaultHandle
	at time.Time
}

// install registers the controls. They are kept for the cluster's lifetime
// and never answer what they do not refuse, so controls a test adds later
// still see every request.
func (s *strictValidator) install() {
	s.kc.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		s.kc.KeepControl()
		req, ok := kreq.(*kmsg.ProduceRequest)
		if !ok {
			return nil, nil, false
		}
		return s.onProduce(req)
	})
	s.kc.ControlKey(int16(kmsg.DeleteRecords), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		s.kc.KeepControl()
		req, ok := kreq.(*kmsg.DeleteRecordsRequest)
		if !ok {
			return nil, nil, false
		}
		s.onDeleteRecords(req)
		return nil, nil, false
	})
}

// rejection is one partition refused with Kafka's code and message.
type rejection struct {
	topic     string
	partition int32
	err       *kerr.Error
	reason    string // why, for the log
	// message is what Kafka puts in the response's ErrorMessage (Produce
	// v8+); "" for none, which is Kafka's answer for every refusal but
	// the per-record ones.
	message string
	// disarm changes the partition's entry in the request so that kfake
	// refuses it on its own without touching the log. Our fault normally
	// answers the partition first, but a fault a test installed earlier
	// wins, and one that imitates a timeout after the append
	// (REQUEST_TIMED_OUT) lets kfake go on to append: without disarming,
	// the refused batch would land in the log.
	disarm func()
}

// kafkaError returns a copy of base carrying Kafka's message, which kfake
// puts in the response's ErrorMessage (Produce v8+) unless it is empty.
// Clients map the code, so the copy behaves exactly like base for them.
func kafkaError(base *kerr.Error, message string) *kerr.Error {
	e := *base
	e.Message = message
	return &e
}

// reject installs the one-shot faults that make kfake answer each refused
// partition of req with its error.
func (s *strictValidator) reject(key kmsg.Key, req kmsg.Request, node int32, rs []rejection) {
	if len(rs) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for _, r := range rs {
		r.disarm()
		h := s.kc.Fault(kfake.Fault{
			Keys:       []kmsg.Key{key},
			Nodes:      []int32{node},
			Topic:      r.topic,
			Partitions: []int32{r.partition},
			Err:        kafkaError(r.err, r.message),
			Count:      1,
			When:       func(got kmsg.Request) bool { return got == req },
		})
		s.pending = append(s.pending, pendingFault{h: h, at: now})
		s.log.Info("strict validation refused a partition",
			"request", key.Name(), "topic", r.topic, "partition", r.partition,
			"error", r.err.Message, "reason", r.reason)
	}
}

// sweep forgets faults that fired (they removed themselves) and removes the
// ones left behind for too long (see pendingFaultTTL).
func (s *strictValidator) sweep() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	kept := s.pending[:0]
	for _, p := range s.pending {
		switch {
		case p.h.Hits() > 0:
		case now.Sub(p.at) > pendingFaultTTL:
			p.h.Remove()
		default:
			kept = append(kept, p)
		}
	}
	clear(s.pending[len(kept):])
	s.pending = kept
}

// producePart is one partition of a produce request as the checks see it.
type producePart struct {
	topic string
	tidx  int // index into req.Topics
	pidx  int // index into req.Topics[tidx].Partitions
	rules topicRules
	// leader reports whether this broker leads the partition. Kafka checks
	// the request's shape before leadership and the batch contents after,
	// so only leaders run the later checks; kfake answers NOT_LEADER itself.
	leader bool
	split  splitResult
	hdr    batchHeader // valid when split.first != nil and long enough
	ok     bool        // passed the request-shape checks
}

// onProduce runs Kafka's produce checks in Kafka's order:
// ProduceRequest.validateRecords per partition, then the request-wide
// transactional checks, then UnifiedLog.analyzeAndValidateRecords and
// LogValidator per partition.
func (s *strictValidator) onProduce(req *kmsg.ProduceRequest) (kmsg.Response, error, bool) {
	s.sweep()
	switch req.Acks {
	case -1, 0, 1:
	default:
		return nil, nil, false // kfake answers INVALID_REQUIRED_ACKS for every partition, as Kafka does
	}
	node := s.kc.CurrentNode()

	var (
		parts    []*producePart
		rejected []rejection
	)
	for ti := range req.Topics {
		rt := &req.Topics[ti]
		name := rt.Topic
		if req.Version >= 13 {
			byID := s.kc.TopicIDInfo(rt.TopicID)
			if byID == nil {
				continue // kfake answers UNKNOWN_TOPIC_ID
			}
			name = byID.Topic
		}
		info := s.kc.TopicInfo(name)
		if info == nil {
			continue // kfake answers UNKNOWN_TOPIC_OR_PARTITION
		}
		leaders := make(map[int32]int32)
		for _, pi := range s.kc.PartitionInfos(name) {
			leaders[pi.Partition] = pi.Leader
		}
		rules := resolveTopicRules(info.Configs, s.broker)
		for pi := range rt.Partitions {
			leader, exists := leaders[rt.Partitions[pi].Partition]
			if !exists {
				continue // kfake answers UNKNOWN_TOPIC_OR_PARTITION
			}
			parts = append(parts, &producePart{
				topic: name, tidx: ti, pidx: pi, rules: rules,
				leader: leader == node,
			})
		}
	}

	// ProduceRequest.validateRecords: the shape of the records field.
	for _, p := range parts {
		rp := &req.Topics[p.tidx].Partitions[p.pidx]
		if r, ok := checkShape(req.Version, rp.Records, p); !ok {
			r.topic, r.partition, r.disarm = p.topic, rp.Partition, disarmProduce(rp)
			rejected = append(rejected, r)
			continue
		}
		p.ok = true
	}

	// KafkaApis.handleProduceRequest and ReplicaManager.handleProduceAppend
	// refuse the whole request here.
	if e, reason := checkTransactional(req, parts); e != nil {
		s.log.Info("strict validation refused a produce request", "error", e.Message, "reason", reason)
		if req.Acks == 0 {
			// Kafka closes the connection of an acks=0 request it fails;
			// a control's error does the same.
			return nil, fmt.Errorf("strict validation: %s: %s", e.Message, reason), true
		}
		return wholeProduceError(req, e), nil, true
	}

	now := s.now().UnixMilli()
	for _, p := range parts {
		if !p.ok || !p.leader {
			continue
		}
		rp := &req.Topics[p.tidx].Partitions[p.pidx]
		// Kafka drops the bytes after the last whole batch; kfake would
		// call them a length mismatch.
		rp.Records = rp.Records[:p.split.consumed]
		if r, ok := checkBatch(p.split.first, p.rules, now, fmt.Sprintf("%s-%d", p.topic, rp.Partition)); !ok {
			r.topic, r.partition, r.disarm = p.topic, rp.Partition, disarmProduce(rp)
			rejected = append(rejected, r)
		}
	}

	s.reject(kmsg.Produce, req, node, rejected)
	return nil, nil, false
}

// disarmProduce empties a refused partition's records: kfake cannot parse an
// empty batch and answers it without appending (and keeps any code a fault
// already gave the partition). Controls added after ours see the emptied
// records.
func disarmProduce(rp *kmsg.ProduceRequestTopicPartition) func() {
	return func() { rp.Records = []byte{} }
}

// checkShape is ProduceRequest.validateRecords (plus the batch iterator's own
// exceptions): one magic-2 batch, and zstd only from Produce v7.
func checkShape(version int16, records []byte, p *producePart) (rejection, bool) {
	p.split = splitBatches(records)
	sp := p.split
	switch {
	case sp.corrupt != "" && sp.batches == 0:
		return rejection{err: kerr.CorruptMessage, reason: sp.corrupt}, false
	case sp.batches == 0:
		return rejection{err: kerr.InvalidRecord, reason: fmt.Sprintf(
			"Produce requests with version %d must have at least one record batch per partition", version)}, false
	case sp.magic != 2:
		return rejection{err: kerr.InvalidRecord, reason: fmt.Sprintf(
			"Produce requests with version %d are only allowed to contain record batches with magic version 2", version)}, false
	}
	if len(sp.first) >= batchHeaderLen {
		p.hdr = readHeader(sp.first)
		if version < 7 && p.hdr.codec() == codecZstd {
			return rejection{err: kerr.UnsupportedCompressionType, reason: fmt.Sprintf(
				"Produce requests with version %d are not allowed to use ZStandard compression", version)}, false
		}
	}
	switch {
	case sp.corrupt != "":
		return rejection{err: kerr.CorruptMessage, reason: sp.corrupt}, false
	case sp.batches > 1:
		return rejection{err: kerr.InvalidRecord, reason: fmt.Sprintf(
			"Produce requests with version %d are only allowed to contain exactly one record batch per partition", version)}, false
	}
	return rejection{}, true
}

// checkTransactional applies the request-wide rules: transactional records
// need a transactional id (KafkaApis answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED
// for the request even without an authorizer), and all transactional batches
// of one request must share one (producer id, epoch) pair (ReplicaManager,
// Kafka 3.7+; 3.6 compared ids only).
func checkTransactional(req *kmsg.ProduceRequest, parts []*producePart) (*kerr.Error, string) {
	type producer struct {
		id    int64
		epoch int16
	}
	seen := make(map[producer]bool)
	for _, p := range parts {
		if !p.ok || len(p.split.first) < batchHeaderLen || !p.hdr.transactional() {
			continue
		}
		if req.TransactionID == nil {
			return kerr.TransactionalIDAuthorizationFailed, "transactional records need a transactional id"
		}
		if p.hdr.producerID >= 0 {
			seen[producer{p.hdr.producerID, p.hdr.producerEpoch}] = true
		}
	}
	if len(seen) > 1 {
		return kerr.InvalidProducerIDMapping, "Transactional records contained more than one producer ID"
	}
	return nil, ""
}

// wholeProduceError answers every partition of req with e, as Kafka's
// ProduceRequest.getErrorResponse does.
func wholeProduceError(req *kmsg.ProduceRequest, e *kerr.Error) *kmsg.ProduceResponse {
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewProduceResponseTopic()
		st.Topic = rt.Topic
		st.TopicID = rt.TopicID
		for _, rp := range rt.Partitions {
			sp := kmsg.NewProduceResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.ErrorCode = e.Code
			sp.BaseOffset = -1
			sp.LogAppendTime = -1
			sp.LogStartOffset = -1
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// checkBatch runs UnifiedLog.analyzeAndValidateRecords, LogValidator and the
// segment-size check of UnifiedLog.append on the one batch of a partition, in
// that order; tp names the partition as Kafka's messages do ("topic-0"). On
// success it may rewrite the batch in place the way Kafka's in-place
// assignment does (see normalizeTimestamps).
func checkBatch(batch []byte, rules topicRules, now int64, tp string) (rejection, bool) {
	bad := func(e *kerr.Error, format string, args ...any) (rejection, bool) {
		return rejection{err: e, reason: fmt.Sprintf(format, args...)}, false
	}
	if len(batch) < batchHeaderLen {
		return bad(kerr.CorruptMessage, "Record batch is %d bytes, shorter than the %d-byte header", len(batch), batchHeaderLen)
	}
	h := readHeader(batch)

	// UnifiedLog.analyzeAndValidateRecords.
	if h.baseOffset != 0 {
		return bad(kerr.InvalidRecord, "The baseOffset of the record batch in the append should be 0, but it is %d", h.baseOffset)
	}
	if int64(len(batch)) > rules.maxMessageBytes {
		return bad(kerr.MessageTooLarge, "The record batch size in the append is %d bytes which exceeds the maximum configured value of %d.", len(batch), rules.maxMessageBytes)
	}
	if got := batchCRC(batch); got != h.crc {
		return bad(kerr.CorruptMessage, "Record is corrupt (stored crc = %d, computed crc = %d)", h.crc, got)
	}

	// LogValidator.validateBatch.
	countFromOffsets := int64(h.lastOffsetDelta) + 1 // baseOffset is 0 here
	switch {
	case countFromOffsets <= 0:
		return bad(kerr.InvalidRecord, "Batch has an invalid offset range: [0, %d]", h.lastOffsetDelta)
	case h.numRecords <= 0:
		return bad(kerr.InvalidRecord, "Invalid reported count for record batch: %d", h.numRecords)
	case countFromOffsets != int64(h.numRecords):
		return bad(kerr.InvalidRecord, "Inconsistent batch offset range [0, %d] and count of records %d", h.lastOffsetDelta, h.numRecords)
	case h.control():
		return bad(kerr.InvalidRecord, "Clients are not allowed to write control records")
	case h.producerID >= 0 && h.baseSequence < 0:
		return bad(kerr.InvalidRecord, "Invalid sequence number %d in record batch with producerId %d", h.baseSequence, h.producerID)
	}

	// LogValidator, per record. Kafka decompresses and walks every record
	// even when it keeps the batch as is.
	if h.codec() > codecZstd {
		// Not verified against Kafka (which fails to map the codec id);
		// this is kfake's own answer.
		return bad(kerr.CorruptMessage, "Invalid compression type %d", h.codec())
	}
	data, err := decompress(h.codec(), batch[batchHeaderLen:])
	if err != nil {
		// Not verified against Kafka either: its decompression streams
		// throw a KafkaException, which may surface differently.
		return bad(kerr.CorruptMessage, "Cannot decompress the records: %v", err)
	}
	var (
		hole            string // the first record whose offset delta is not its index
		keyErrs, tsErrs int
		keyErrors       []string // Kafka's RecordError strings, the first three
		tsReason        string
		maxTimestamp    int64 = -1
	)
	err = forEachRecord(data, h.numRecords, func(i int, r record) {
		if r.offsetDelta != int32(i) && hole == "" {
			hole = fmt.Sprintf("record %d has offset delta %d", i, r.offsetDelta)
		}
		ts := h.baseTimestamp + r.timestampDelta
		if h.logAppendTime() {
			ts = h.maxTimestamp // DefaultRecordBatch gives every record the batch's time
		}
		maxTimestamp = max(maxTimestamp, ts)
		// LogValidator.validateRecord: a key error is the record's error
		// and its timestamp is then not looked at.
		if rules.compact && r.keyNull {
			if keyErrs++; keyErrs <= 3 {
				keyErrors = append(keyErrors, fmt.Sprintf(
					"RecordError(batchIndex=%d, message='Compacted topic cannot accept message without key in topic partition %s')", i, tp))
			}
			return
		}
		var reason string
		switch {
		case !rules.logAppendTime && ts != -1:
			diff := now - ts // Java's arithmetic, overflow included
			if diff > rules.beforeMaxMs || -diff > rules.afterMaxMs {
				reason = fmt.Sprintf("Timestamp %d of message with offset %d is out of range. The timestamp should be within [%d, %d]",
					ts, i, now-rules.beforeMaxMs, now+rules.afterMaxMs)
			}
		case h.logAppendTime():
			reason = fmt.Sprintf("Invalid timestamp type in message %d. Producer should not set timestamp type to LogAppendTime.", i)
		}
		if reason != "" {
			if tsErrs++; tsErrs == 1 {
				tsReason = reason
			}
		}
	})
	switch {
	case err != nil:
		return bad(kerr.InvalidRecord, "%v", err)
	case tsErrs > 0:
		// LogValidator.processRecordErrors: any timestamp error makes the
		// whole batch INVALID_TIMESTAMP, with a message that names none.
		const msg = "One or more records have been rejected due to invalid timestamp"
		return rejection{err: kerr.InvalidTimestamp, reason: msg + ": " + tsReason, message: msg}, false
	case keyErrs > 0:
		msg := fmt.Sprintf("One or more records have been rejected due to %d record errors in total, and only showing the first three errors at most: [%s]",
			keyErrs, strings.Join(keyErrors, ", "))
		return rejection{err: kerr.InvalidRecord, reason: msg, message: msg}, false
	case hole != "" && h.codec() != codecNone:
		// Kafka's answer, a broker bug: for a compressed batch it can keep
		// (compression.type producer, the default) LogValidator reads the
		// records with the iterator that skips keys and values, then finds
		// the inner offsets are not 0..n-1 and rebuilds the batch from
		// those key-less records, which throws (PartialDefaultRecord.key:
		// UnsupportedOperationException). An uncompressed batch with such
		// deltas is kept as is (assignOffsetsNonCompressed never looks at
		// them), and kfake keeps it as is too. Not imitated: a topic whose
		// compression.type names another codec, where Kafka recompresses
		// every batch and so renumbers the inner offsets.
		return bad(kerr.UnknownServerError, "Compressed batch with inner offsets not 0..n-1 (%s): Kafka fails rebuilding it (key is skipped in PartialDefaultRecord)", hole)
	}

	// UnifiedLog.append.
	if int64(len(batch)) > rules.segmentBytes {
		return bad(kerr.RecordListTooLarge, "The size of this batch (%d bytes) exceeds the size of a segment (%d bytes)", len(batch), rules.segmentBytes)
	}

	if !rules.logAppendTime {
		normalizeTimestamps(batch, h, maxTimestamp)
	}
	return rejection{}, true
}

// normalizeTimestamps does what Kafka's in-place assignment does to an
// accepted batch on a CreateTime topic (DefaultRecordBatch.setMaxTimestamp):
// store the batch as CreateTime with the largest record timestamp as its max
// timestamp, and recompute the CRC if either changed. kfake would otherwise
// store a client LogAppendTime batch and rewrite its timestamps without
// fixing the CRC, so that every later fetch of it fails.
//
// LogAppendTime topics are not imitated: kfake's own rewrite of the first
// timestamp would break the CRC again.
func normalizeTimestamps(batch []byte, h batchHeader, maxTimestamp int64) {
	if !h.logAppendTime() && h.maxTimestamp == maxTimestamp {
		return
	}
	attrs := uint16(h.attributes) &^ attrLogAppendTime
	be := binary.BigEndian
	be.PutUint16(batch[offAttributes:], attrs)
	be.PutUint64(batch[offMaxTimestamp:], uint64(maxTimestamp))
	be.PutUint32(batch[offCRC:], batchCRC(batch))
}

// onDeleteRecords refuses DeleteRecords on partitions of topics whose
// cleanup.policy lacks delete (Partition.deleteRecordsOnLeader checks it
// before anything else, after the leadership check).
func (s *strictValidator) onDeleteRecords(req *kmsg.DeleteRecordsRequest) {
	s.sweep()
	node := s.kc.CurrentNode()
	var rejected []rejection
	for ti := range req.Topics {
		rt := &req.Topics[ti]
		info := s.kc.TopicInfo(rt.Topic)
		if info == nil {
			continue // kfake answers UNKNOWN_TOPIC_OR_PARTITION
		}
		if resolveTopicRules(info.Configs, s.broker).delete {
			continue
		}
		leaders := make(map[int32]int32)
		for _, pi := range s.kc.PartitionInfos(rt.Topic) {
			leaders[pi.Partition] = pi.Leader
		}
		for pi := range rt.Partitions {
			rp := &rt.Partitions[pi]
			if leader, ok := leaders[rp.Partition]; !ok || leader != node {
				continue // kfake answers UNKNOWN_TOPIC_OR_PARTITION or NOT_LEADER
			}
			rejected = append(rejected, rejection{
				topic: rt.Topic, partition: rp.Partition, err: kerr.PolicyViolation,
				reason: fmt.Sprintf("Records of partition %s-%d can not be deleted due to the configured policy", rt.Topic, rp.Partition),
				// kfake refuses an offset below the log start
				// (OFFSET_OUT_OF_RANGE) without moving it; only -1
				// has a meaning.
				disarm: func() { rp.Offset = -2 },
			})
		}
	}
	s.reject(kmsg.DeleteRecords, req, node, rejected)
}
