package mirror

// Promote (StopPromote): a partition is stopped only once the source has
// nothing the destination lacks. Its partition mirror keeps running while
// the promote waits for the source's open transactions to be decided and
// for lag 0, within Config.PromoteTimeout; then it is halted and stopped
// as a failover stop is, unless the source moved on meanwhile.

import (
	"context"
	"fmt"
	"time"

	"github.com/kmirror/kmirror/agent/fetcher"
	"github.com/kmirror/kmirror/agent/leaders"
	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/internal/reason"
)

// stopPromote moves tp to STOPPING and waits for lag 0 in the background.
func (m *Runner) stopPromote(tp fetcher.TP) {
	m.life.newPromote(tp, time.Now().Add(m.cfg.PromoteTimeout))
	m.mu.Lock()
	rp := m.parts[tp]
	running := rp != nil && rp.stop != nil
	m.mu.Unlock()
	pr := stateRecord(partition.Stopping, m.promoteWaiting(tp.Topic, ""))
	pr.StopMode = StopPromote
	if running {
		pr.LastMirroredOffset = rp.pm.Status().LastMirrored
		m.persist(tp, pr)
		m.startPromote(tp, rp.pm)
		return
	}
	// Paused, or the source is not connected: the mirror starts it at its
	// next look, and the promote waits from there.
	if rp == nil {
		rp, _ = m.take(tp)
	}
	rp.pm.SetStopping(m.promoteWaiting(tp.Topic, " (the partition mirror starts again first)"))
	m.restartPartition(tp, pr, false)
}

const promoteReason = "promote: waiting until the source's last stable offset and the destination end reach the source high watermark"

// promoteWaiting is the reason of a partition a promote of topic waits for:
// promoteReason, then more, then the fence note.
func (m *Runner) promoteWaiting(topic, more string) reason.Error {
	return reason.Error{Code: reason.PromoteInProgress, Message: promoteReason + more + m.fences.note(topic)}
}

// startPromote waits in the background until pm reaches lag 0, then stops
// it as failover does.
func (m *Runner) startPromote(tp fetcher.TP, pm *partition.Mirror) {
	deadline := m.life.promoteDeadline(tp, time.Now().Add(m.cfg.PromoteTimeout))
	pm.SetStopping(m.promoteWaiting(tp.Topic, ""))
	m.ops.Add(1)
	go func() {
		defer m.ops.Done()
		m.promote(tp, pm, deadline)
	}()
}

func (m *Runner) promote(tp fetcher.TP, pm *partition.Mirror, deadline time.Time) {
	var first lagSample // the first wait on lag
	for m.ctx.Err() == nil {
		m.mu.Lock()
		rp := m.parts[tp]
		m.mu.Unlock()
		mode, _ := m.life.stopMode(tp)
		if rp == nil || rp.pm != pm || rp.stop == nil || mode != StopPromote {
			return // replaced: reconnected, restarted, or a failover took over
		}
		st := pm.Status()
		if st.State == partition.Failed {
			m.life.endPromote(tp)
			return
		}
		waitFor, lag := m.promoteWaitsFor(tp, pm, st)
		if waitFor == "" {
			m.promoteStop(tp, rp)
			return
		}
		if lag > 0 {
			now := lagSample{lag: lag, at: time.Now()}
			if first.at.IsZero() {
				first = now
			}
			waitFor += growingNote(first, now)
		}
		if time.Now().After(deadline) {
			r := reason.New(reason.PromoteTimedOut, "promote timed out after %s waiting for %s; the partition keeps mirroring: promote again, or stop with mode failover", m.cfg.PromoteTimeout, waitFor)
			m.life.endPromote(tp)
			pm.ClearStopping(r)
			pr := stateRecord(partition.Mirroring, r)
			pr.LastMirroredOffset = pm.Status().LastMirrored
			m.persist(tp, pr)
			m.log.Warn("promote timed out", "partition", tp.String(), "waiting_for", waitFor)
			return
		}
		pm.SetStopping(reason.Error{Code: reason.PromoteInProgress, Message: "promote: waiting for " + waitFor + m.fences.note(tp.Topic)})
		select {
		case <-m.ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// promoteWaitsFor says what a promote of pm still waits for, "" for
// nothing, and the lag when it waits on lag (0 otherwise).
func (m *Runner) promoteWaitsFor(tp fetcher.TP, pm *partition.Mirror, st partition.Status) (string, int64) {
	ctx, cancel := context.WithTimeout(m.ctx, 5*time.Second)
	defer cancel()
	src, err := pm.SourceBounds(ctx)
	why := promoteWait(src, err, st.DestinationOffset, m.throttle.note(tp))
	if err != nil || src.LastStable < src.HighWatermark {
		return why, 0
	}
	return why, max(0, src.HighWatermark-st.DestinationOffset)
}

// lagSample is a promote's lag when it was read.
type lagSample struct {
	lag int64
	at  time.Time
}

// growingAfter is how long a promote waits on lag before it says the lag
// grows: long enough for a mirror catching up to drain what it had.
const growingAfter = 10 * time.Second

// growingNote says, once a promote has waited growingAfter since first,
// that the lag grew meanwhile: the source then takes records faster than
// the mirror copies them, and the promote cannot finish on its own.
func growingNote(first, now lagSample) string {
	if now.at.Sub(first.at) < growingAfter || now.lag <= first.lag {
		return ""
	}
	return fmt.Sprintf("; the lag grew from %d to %d in %s: the source takes records faster than the mirror copies them, so the promote "+
		"cannot finish while that lasts: stop the source's producers (a promote needs the source quiet), raise or remove the mirror's throttle, "+
		"or stop with mode failover", first.lag, now.lag, now.at.Sub(first.at).Round(time.Second))
}

// promoteWait says what a promote still waits for, "" for nothing, from the
// source's bounds (or the error reading them) and the destination end; a
// wait on lag ends with throttleNote (throttle.note).
func promoteWait(src leaders.Bounds, err error, dstEnd int64, throttleNote string) string {
	switch {
	case err != nil:
		return fmt.Sprintf("the source to answer (%v)", err)
	case src.LastStable < src.HighWatermark:
		return fmt.Sprintf("the source's open transactions to be decided (last stable offset %d, high watermark %d)", src.LastStable, src.HighWatermark)
	case dstEnd < src.HighWatermark:
		return fmt.Sprintf("the destination end %d to reach the source high watermark %d (lag %d)%s", dstEnd, src.HighWatermark, src.HighWatermark-dstEnd, throttleNote)
	}
	return ""
}

// promoteStop halts a caught-up partition and stops it when nothing
// reached the source in between; otherwise it mirrors on and the promote
// waits again.
func (m *Runner) promoteStop(tp fetcher.TP, rp *runningPartition) {
	m.mu.Lock()
	stop := rp.stop
	rp.stop = nil
	m.mu.Unlock()
	pm := rp.pm
	halted := halt(rp, stop, false, 2*time.Second, 10*time.Second)
	ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
	defer cancel()
	dst, derr := pm.DestinationBounds(ctx)
	src, serr := pm.SourceBounds(ctx)
	if halted && derr == nil && serr == nil && src.LastStable == src.HighWatermark && dst.HighWatermark == src.HighWatermark {
		m.finishStop(tp, rp, nil, StopPromote)
		m.life.promoted(tp)
		return
	}
	m.log.Info("promote: the source moved on while the partition stopped; mirroring on", "partition", tp.String())
	if mode, _ := m.life.stopMode(tp); mode == StopPromote {
		pr := stateRecord(partition.Stopping, m.promoteWaiting(tp.Topic, ""))
		pr.StopMode = StopPromote
		m.restartPartition(tp, pr, false)
	}
}
