// Package reason names why a mirror partition or topic is not simply
// mirroring, in the spirit of franz-go's kerr: every reason has a stable Code,
// which programs compare (the API's reason_code, a metric label, the
// Terraform provider), and a message, which people read and which may be
// reworded. The troubleshooting guide has one section per code.
//
// The package is a leaf: it imports the standard library only, so that the
// agent, the API types and the provider can all share it.
package reason

import (
	"errors"
	"fmt"
)

// Code is a reason's stable name, in SCREAMING_SNAKE_CASE. A code is never
// renamed or reused for another meaning; new ones may be added.
type Code string

// The codes of a FAILED partition: mirroring it on would break the offset
// invariant, so it stops until a user acts (recover, or stop).
const (
	// ForeignWrite: something other than the agent wrote to the
	// destination topic (a batch of a producer id the agent does not own, a
	// record it did not write, or an offset taken before the agent's write).
	ForeignWrite Code = "FOREIGN_WRITE"
	// ProducerIDInUse: the destination's last batch of the agent's
	// producer id has another epoch: another writer uses that producer id.
	ProducerIDInUse Code = "PRODUCER_ID_IN_USE"
	// TransactionalIDInUse: a transaction of one of the agent's
	// transactional ids was committed, which the agent never does: another
	// process uses them.
	TransactionalIDInUse Code = "TRANSACTIONAL_ID_IN_USE"
	// TransactionFenced: a destination transaction of the agent was
	// aborted under it (its timeout expired) or fenced by another agent
	// taking the partition over.
	TransactionFenced Code = "TRANSACTION_FENCED"
	// TransactionalIDUnauthorized: the agent lacks WRITE or DESCRIBE on
	// its transactional ids on the destination.
	TransactionalIDUnauthorized Code = "TRANSACTIONAL_ID_UNAUTHORIZED"
	// DestinationLostRecords: the destination lost records it had
	// acknowledged (its log end went back, a write landed below the
	// expected offset, or the log is empty with no alignment record).
	DestinationLostRecords Code = "DESTINATION_LOST_RECORDS"
	// DestinationAhead: the destination log end is beyond the source high
	// watermark: the source was truncated or recreated, or something else
	// wrote to the destination.
	DestinationAhead Code = "DESTINATION_AHEAD"
	// SourceTopicRecreated: the source topic's id changed: it was deleted
	// and created again, and its offsets no longer match the destination's
	// (the whole topic fails).
	SourceTopicRecreated Code = "SOURCE_TOPIC_RECREATED"
	// SourceTopicRecreatedRealignFailed: a recover of a topic whose source
	// was recreated cannot re-align it; the destination topic must be
	// recreated (kmirror recover --recreate).
	SourceTopicRecreatedRealignFailed Code = "SOURCE_TOPIC_RECREATED_REALIGN_FAILED"
	// DestinationTopicRecreated: the destination topic's id changed: the
	// records mirrored into it are lost (the whole topic fails).
	DestinationTopicRecreated Code = "DESTINATION_TOPIC_RECREATED"
	// RealignFailed: a failure that a recover may clear came back right
	// after a recover; the destination topic must be recreated.
	RealignFailed Code = "REALIGN_FAILED"
	// DuplicateMarker: the destination holds a transaction marker where
	// the source has a visible record, which would shift every later
	// offset.
	DuplicateMarker Code = "DUPLICATE_MARKER"
	// MarkersRefused: the destination refused filler markers and appended
	// the batch the agent had sent right behind them, which landed early:
	// every later offset is shifted.
	MarkersRefused Code = "MARKERS_REFUSED"
	// DestinationRefused: the destination refused a batch with an error
	// that retrying cannot fix.
	DestinationRefused Code = "DESTINATION_REFUSED"
	// KeylessRecordRefused: a compacted destination topic refused source
	// records without a key.
	KeylessRecordRefused Code = "KEYLESS_RECORD_REFUSED"
	// SequenceLasting: the destination refused the agent's sequence or
	// producer epoch at one offset too many times in a row.
	SequenceLasting Code = "SEQUENCE_LASTING"
	// SourceBatchInvalid: a batch fetched from the source cannot be read
	// (malformed, or a format older than v2).
	SourceBatchInvalid Code = "SOURCE_BATCH_INVALID"
	// BatchRewriteFailed: the agent could not rewrite a valid source batch
	// into a destination batch: a bug.
	BatchRewriteFailed Code = "BATCH_REWRITE_FAILED"
)

// The codes of a partition that is not FAILED but has something to say.
const (
	// HangingTransaction: mirroring waits for a source transaction that
	// has stayed open (it holds the source's last stable offset).
	HangingTransaction Code = "HANGING_TRANSACTION"
	// SequenceRetrying: a sequence or producer error is being retried; it
	// becomes SequenceLasting if it goes on.
	SequenceRetrying Code = "SEQUENCE_RETRYING"
	// RetentionLoss: source retention removed records before they were
	// mirrored; those offsets are missing on the destination.
	RetentionLoss Code = "RETENTION_LOSS"
	// Aligning: the destination's log start is being aligned with the
	// source's (PREPARING).
	Aligning Code = "ALIGNING"
	// Resuming: a paused partition resumes from the destination end.
	Resuming Code = "RESUMING"
	// Recovering: a recover cleared the partition's failure and it
	// re-aligns with the source (or mirrors a recreated destination topic
	// from the source's log start).
	Recovering Code = "RECOVERING"
	// AwaitingPlacement: a new partition waits for the agents' group to
	// place it on an agent (INITIALIZING, described by its mirror's home).
	AwaitingPlacement Code = "AWAITING_PLACEMENT"
	// PromoteInProgress: a promote waits for lag 0 before it stops the
	// partition.
	PromoteInProgress Code = "PROMOTE_IN_PROGRESS"
	// PromoteTimedOut: a promote did not reach lag 0 in time; the
	// partition mirrors on.
	PromoteTimedOut Code = "PROMOTE_TIMED_OUT"
	// FailoverInProgress: a failover stop is under way.
	FailoverInProgress Code = "FAILOVER_IN_PROGRESS"
	// StopTimedOut: a stop could not finish the destination side in time;
	// stopping again retries it.
	StopTimedOut Code = "STOP_TIMED_OUT"
	// SourceNotFenced: a promote stopped the partition without fencing
	// writes on the source.
	SourceNotFenced Code = "SOURCE_NOT_FENCED"
)

// The codes of a topic's error: the topic is not mirrored.
const (
	// SourceTopicMissing: the source topic does not exist.
	SourceTopicMissing Code = "SOURCE_TOPIC_MISSING"
	// DestinationHasMorePartitions: the destination topic has more
	// partitions than the source, which Kafka cannot remove.
	DestinationHasMorePartitions Code = "DESTINATION_HAS_MORE_PARTITIONS"
)

// known is every code, in the troubleshooting guide's order.
var known = []Code{
	ForeignWrite, ProducerIDInUse, TransactionalIDInUse, TransactionFenced, TransactionalIDUnauthorized,
	DestinationLostRecords, DestinationAhead,
	SourceTopicRecreated, SourceTopicRecreatedRealignFailed, DestinationTopicRecreated, RealignFailed,
	DuplicateMarker, MarkersRefused, DestinationRefused, KeylessRecordRefused, SequenceLasting, SourceBatchInvalid, BatchRewriteFailed,
	HangingTransaction, SequenceRetrying, RetentionLoss, Aligning, Resuming, Recovering, AwaitingPlacement,
	PromoteInProgress, PromoteTimedOut, FailoverInProgress, StopTimedOut, SourceNotFenced,
	SourceTopicMissing, DestinationHasMorePartitions,
}

// Known returns every code the agent reports, in the troubleshooting
// guide's order.
func Known() []Code { return append([]Code(nil), known...) }

// Error is a reason: a code and its message. The zero Error is no reason.
// As an error (a *Error), errors.As finds it through any wrapping, and
// CodeOf reads its code.
type Error struct {
	Code    Code
	Message string
}

// Error returns the message.
func (e *Error) Error() string { return e.Message }

// New returns the reason code with the message fmt.Sprintf(format, args...).
func New(code Code, format string, args ...any) Error {
	return Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Errorf is New as an error.
func Errorf(code Code, format string, args ...any) error {
	e := New(code, format, args...)
	return &e
}

// CodeOf returns the code of the first *Error in err's chain, "" when
// there is none.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}
