package membership

// Rebalancing on measured load. The leader balances by weight only when the
// group rebalances, and weights change in between: a mirror's byte rate
// grows, another's falls. So each member compares two views of the
// generation's loads: as the generation weighed its items, and with its own
// items weighing what it measures now. When the second would make the
// leader move an item (the rule of assign) and the first would not, and
// that has held for Config.BalanceDelay, the member rejoins with its
// weights, which rebalances the group: Kafka (and kfake) rebalance a stable
// group when a member joins with changed metadata. The next generation
// carries those weights, so the same measurements do not ask again, and
// measurements that differ by a little ask nothing (worthMoving).

import (
	"time"
)

// worthMoving says whether moving an item of weight w from a member loaded
// hi to one loaded lo narrows the gap between them by more than half the
// item's weight: the rule assign balances by.
func worthMoving(hi, lo, w int64) bool { return 2*(hi-lo) > 3*w }

// weighed is an owned item as balancing sees it.
type weighed struct {
	w     int64
	fixed bool // balancing never moves it (fixedItems)
}

// wouldMove says whether assign would move an item for balance between
// members owning these items (one slice per member): the lightest item
// that may move of the most loaded member, when it has two or more, to the
// least loaded.
func wouldMove(owned [][]weighed) bool {
	if len(owned) < 2 {
		return false
	}
	load := make([]int64, len(owned))
	for i, its := range owned {
		for _, it := range its {
			load[i] += it.w
		}
	}
	hi, lo := extremes(load)
	if len(owned[hi]) < 2 {
		return false
	}
	lightest := int64(-1)
	for _, it := range owned[hi] {
		if !it.fixed && (lightest < 0 || it.w < lightest) {
			lightest = it.w
		}
	}
	return lightest >= 0 && worthMoving(load[hi], load[lo], lightest)
}

// extremes are the most and the least loaded members, the first of each
// in load's order: the pair assign moves an item between.
func extremes(load []int64) (hi, lo int) {
	for j := range load {
		if load[j] > load[hi] {
			hi = j
		}
		if load[j] < load[lo] {
			lo = j
		}
	}
	return hi, lo
}

// unbalancedLocked says whether the weights this member measured call for
// a rebalance that the generation's own weights do not.
func (m *Member) unbalancedLocked(fixed map[string]bool) bool {
	if len(m.members) < 2 || m.moving {
		return false
	}
	at := make(map[string]int, len(m.members))
	for i, l := range m.members {
		at[l.Agent] = i
	}
	then := make([][]weighed, len(m.members))
	now := make([][]weighed, len(m.members))
	for k, agent := range m.owners {
		i, ok := at[agent]
		if !ok {
			continue
		}
		w := max(m.knownWeights[k], 1)
		then[i] = append(then[i], weighed{w, fixed[k]})
		if mw := m.weights[k]; agent == m.cfg.AgentID && mw > 0 {
			w = mw
		}
		now[i] = append(now[i], weighed{w, fixed[k]})
	}
	return wouldMove(now) && !wouldMove(then)
}

// balanceDue says whether the member should rejoin now for balance: its
// measured loads have called for it for BalanceDelay.
func (m *Member) balanceDue(now time.Time) bool {
	var fixed map[string]bool
	if m.cfg.Items != nil {
		fixed = fixedItems(m.cfg.Items())
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cfg.BalanceDelay < 0 || !m.unbalancedLocked(fixed) {
		m.unbalancedSince = time.Time{}
		return false
	}
	if m.unbalancedSince.IsZero() {
		m.unbalancedSince = now
	}
	if now.Sub(m.unbalancedSince) < m.cfg.BalanceDelay {
		return false
	}
	m.log.Info("the loads this agent measures are out of balance with the group's: asking for a rebalance", "group", m.cfg.Group, "generation", m.gen, "since", m.unbalancedSince)
	m.unbalancedSince = time.Time{}
	return true
}
