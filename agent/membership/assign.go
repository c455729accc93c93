package membership

import (
	"cmp"
	"slices"
)

// Item is one unit of work: a mirror partition, keyed as the caller likes.
type Item struct {
	Key string `json:"k"`
	// Weight is the item's share of the work (its byte rate, say); 0
	// counts as 1.
	Weight int64 `json:"w,omitempty"`
}

func (it Item) weight() int64 { return max(it.Weight, 1) }

// memberMeta is what a member says of itself when it joins.
type memberMeta struct {
	Version int    `json:"v"`
	Agent   string `json:"agent"`
	// Process tells this process from another of the same agent id.
	Process string `json:"process,omitempty"`
	// API is where the agent's API answers.
	API string `json:"api,omitempty"`
	// Previous are the members of the last generation it was assigned in,
	// PreviousGen (none for a process that never was).
	Previous    []MemberLoad `json:"previous,omitempty"`
	PreviousGen int32        `json:"previous_gen,omitempty"`
	// PreviousItems are every item of that generation, owned or moving:
	// an item none of them is new, and has no earlier owner to wait out.
	PreviousItems []string `json:"previous_items,omitempty"`
	// PreviousWeights are the measured weights that generation's
	// assignment used: an item keeps its weight when it moves, until its
	// new owner measures it.
	PreviousWeights map[string]int64 `json:"previous_weights,omitempty"`
	// Owned are the items it writes now, with their weights as it
	// measures them.
	Owned []Item `json:"owned,omitempty"`
	// Released are items it stopped writing since the last generation,
	// every write of them returned: the next owner need not wait.
	Released []string `json:"released,omitempty"`
	// Waiting are items it lost while still waiting out an earlier owner
	// that may be inside its session: their next owner waits as long.
	Waiting []string `json:"waiting,omitempty"`
}

// assignment is what the leader gives one member.
type assignment struct {
	Version int `json:"v"`
	// Items are the member's items this generation.
	Items []string `json:"items,omitempty"`
	// Orphans are those of Items whose last owner did not release them:
	// its last writes may still be on their way.
	Orphans []string `json:"orphans,omitempty"`
	// New are those of Items the previous generation did not have: no
	// member ever wrote them, so none is waited out.
	New []string `json:"new,omitempty"`
	// Replaced: a member of the previous generation was replaced by a new
	// process of its agent id (or the previous generation is not known),
	// or an orphan given here was lost by a member still waiting out an
	// earlier owner (Waiting): an orphan's last owner may still be inside
	// its session, not only its last writes on their way.
	Replaced bool `json:"replaced,omitempty"`
	// Rejoin: some items move from one member to another this round; each
	// member rejoins once it has stopped what it lost, and the next round
	// hands them on.
	Rejoin bool `json:"rejoin,omitempty"`
	// Members are the agents of the generation and how many items each
	// has, for status.
	Members []MemberLoad `json:"members,omitempty"`
	// Owners are the agent ids of the owners of the generation's items,
	// for calls to be forwarded to them.
	Owners map[string]string `json:"owners,omitempty"`
	// Moving are the generation's items nobody owns in it: taken from
	// their owner, handed on next round.
	Moving []string `json:"moving,omitempty"`
	// Weights are the measured weights (above 1) of the generation's
	// items, told back by the members at their next join.
	Weights map[string]int64 `json:"weights,omitempty"`
}

// MemberLoad is one member's share of a generation.
type MemberLoad struct {
	Agent   string `json:"agent"`
	Process string `json:"process,omitempty"`
	API     string `json:"api,omitempty"`
	Items   int    `json:"items"`
	Weight  int64  `json:"weight"`
}

// joined is a member as the leader sees it in a JoinGroup answer.
type joined struct {
	id   string // member id
	meta memberMeta
}

// assign divides items among members, sticky and cooperative:
//
//   - An item weighs what its owner measured (its byte rate), what its
//     last owner measured until then, or 1.
//   - A member keeps what it owns, but items two members claim, and,
//     while moving the lightest item of the most loaded member to the
//     least loaded narrows the gap between them by more than half its
//     weight, that item: those are taken from it this round and given to
//     nobody; it rejoins once it stopped them (Rejoin), and the next round
//     gives them on as released.
//   - Items nobody owns go to the least loaded member, heaviest first;
//     those no member released are orphans (the owner died or was
//     replaced), which the new owner waits out before its first write
//     when some member of the previous generation was replaced by a new
//     process (Replaced), as its old process may still be inside its
//     session. An item the previous generation (gen-1, as a member here
//     was assigned in it) did not have at all is new, not an orphan: no
//     member ever owned it, as only a generation gives items out.
//
// Members are identified by member id; the result is keyed the same way.
func assign(items []Item, members []joined, gen int32) map[string]assignment {
	out := make(map[string]assignment, len(members))
	if len(members) == 0 {
		return out
	}
	slices.SortFunc(members, func(a, b joined) int {
		return cmp.Or(cmp.Compare(a.meta.Agent, b.meta.Agent), cmp.Compare(a.id, b.id))
	})
	weights := make(map[string]int64, len(items))
	for _, it := range items {
		if _, dup := weights[it.Key]; dup {
			continue
		}
		weights[it.Key] = it.weight()
	}
	// Weights measured earlier travel with their items; the owners'
	// measurements replace them, and the leader's guess.
	for k, w := range previousWeights(members) {
		if _, ok := weights[k]; ok {
			weights[k] = w
		}
	}
	claims := map[string]int{}
	released, waiting := map[string]bool{}, map[string]bool{}
	for _, m := range members {
		for _, k := range m.meta.Waiting {
			waiting[k] = true
		}
		for _, it := range m.meta.Owned {
			// An item the leader does not know yet (its view of the
			// mirrors lags the owner's) stays with its owner; an owner
			// stops an item whose mirror went, and claims it no more.
			if _, ok := weights[it.Key]; !ok || it.Weight > 0 {
				weights[it.Key] = it.weight()
			}
			claims[it.Key]++
		}
		for _, k := range m.meta.Released {
			released[k] = true
		}
	}
	load := make([]int64, len(members))
	mine := make([][]string, len(members))
	moving := false
	placed := map[string]bool{}
	for i, m := range members {
		owned := slices.Clone(m.meta.Owned)
		// Heaviest first: what moves below is the lightest, which
		// balances finely elsewhere; the heaviest would only make its
		// next owner the most loaded in turn.
		slices.SortFunc(owned, func(a, b Item) int {
			return cmp.Or(cmp.Compare(weights[b.Key], weights[a.Key]), cmp.Compare(a.Key, b.Key))
		})
		for _, it := range owned {
			if claims[it.Key] > 1 {
				moving = true // claimed twice: revoked from both
				continue
			}
			load[i] += weights[it.Key]
			mine[i] = append(mine[i], it.Key)
			placed[it.Key] = true
		}
	}
	// Then, while moving the lightest item of the most loaded member to
	// the least loaded one narrows the gap between them by more than half
	// the item's weight, it moves: a member that joined gets its share,
	// and measured weights that differ by a little (or shares that cannot
	// be equal, 4 items over 3 members) move nothing, so that nothing
	// moves back and forth. A move narrows a gap g to |g-2w|, by more
	// than w/2 when g > 1.5w; after it, the two are within 2w-g < w/2 of
	// each other, and the move back would need a gap above 1.5w.
	// The item is revoked now and handed on next round, when the least
	// loaded member takes it; kept counts the loads as they will be once
	// every item not kept (claimed twice, or nobody's) went to the least
	// loaded.
	kept := slices.Clone(load)
	keptBy := map[string]bool{}
	for i := range members {
		for _, k := range mine[i] {
			keptBy[k] = true
		}
	}
	var rest []int64
	for k, w := range weights {
		if !keptBy[k] {
			rest = append(rest, w)
		}
	}
	slices.SortFunc(rest, func(a, b int64) int { return cmp.Compare(b, a) })
	for _, w := range rest {
		kept[slices.Index(kept, slices.Min(kept))] += w
	}
	for {
		hi, lo := 0, 0
		for j := range members {
			if kept[j] > kept[hi] {
				hi = j
			}
			if kept[j] < kept[lo] {
				lo = j
			}
		}
		if len(mine[hi]) < 2 {
			break
		}
		last := len(mine[hi]) - 1
		k := mine[hi][last] // the lightest, as owned was sorted
		w := weights[k]
		if 2*(kept[hi]-kept[lo]) <= 3*w {
			break
		}
		mine[hi] = mine[hi][:last]
		load[hi] -= w
		kept[hi] -= w
		kept[lo] += w
		moving = true
	}
	for k, c := range claims {
		if c > 1 {
			placed[k] = true // handed on once both released it
		}
	}
	var free []string
	for k := range weights {
		if !placed[k] {
			free = append(free, k)
		}
	}
	slices.SortFunc(free, func(a, b string) int {
		return cmp.Or(-cmp.Compare(weights[a], weights[b]), cmp.Compare(a, b))
	})
	before, knowsBefore := previousItems(members, gen)
	orphans := make([][]string, len(members))
	news := make([][]string, len(members))
	for _, k := range free {
		i := 0
		for j := range members {
			if load[j] < load[i] {
				i = j
			}
		}
		load[i] += weights[k]
		mine[i] = append(mine[i], k)
		switch {
		case knowsBefore && !before[k]:
			news[i] = append(news[i], k)
		case !released[k]:
			orphans[i] = append(orphans[i], k)
		}
	}
	loads := make([]MemberLoad, len(members))
	for i, m := range members {
		loads[i] = MemberLoad{Agent: m.meta.Agent, Process: m.meta.Process, API: m.meta.API, Items: len(mine[i]), Weight: load[i]}
	}
	owners := map[string]string{}
	for i, m := range members {
		for _, k := range mine[i] {
			owners[k] = m.meta.Agent
		}
	}
	var unowned []string
	for k := range weights {
		if _, ok := owners[k]; !ok {
			unowned = append(unowned, k)
		}
	}
	slices.Sort(unowned)
	measured := map[string]int64{}
	for k, w := range weights {
		if w > 1 {
			measured[k] = w
		}
	}
	replaced := replacedSince(members)
	for i, m := range members {
		slices.Sort(mine[i])
		slices.Sort(orphans[i])
		slices.Sort(news[i])
		long := replaced || slices.ContainsFunc(orphans[i], func(k string) bool { return waiting[k] })
		out[m.id] = assignment{Version: 1, Items: mine[i], Orphans: orphans[i], New: news[i], Rejoin: moving, Replaced: long, Members: loads, Owners: owners, Moving: unowned, Weights: measured}
	}
	return out
}

// previousWeights are the weights the newest generation a member here was
// assigned in used.
func previousWeights(members []joined) map[string]int64 {
	var out map[string]int64
	gen := int32(-1)
	for _, m := range members {
		if m.meta.PreviousWeights != nil && m.meta.PreviousGen > gen {
			out, gen = m.meta.PreviousWeights, m.meta.PreviousGen
		}
	}
	return out
}

// previousItems are the items of generation gen-1, as a member assigned in
// it tells them; ok is false when no member here was (then no item can be
// told new).
func previousItems(members []joined, gen int32) (items map[string]bool, ok bool) {
	for _, m := range members {
		if len(m.meta.Previous) > 0 && m.meta.PreviousGen == gen-1 {
			items = map[string]bool{}
			for _, k := range m.meta.PreviousItems {
				items[k] = true
			}
			return items, true
		}
	}
	return nil, false
}

// replacedSince says whether a member of the previous generation, as the
// member assigned most recently remembers it, is here now as another process of its agent id; or
// whether no member knows the previous generation. A previous member that
// is gone was removed by the coordinator when its session ran out (or it
// left): by then it had stopped writing.
func replacedSince(members []joined) bool {
	var previous []MemberLoad
	gen := int32(-1)
	for _, m := range members {
		if len(m.meta.Previous) > 0 && m.meta.PreviousGen > gen {
			previous, gen = m.meta.Previous, m.meta.PreviousGen
		}
	}
	if previous == nil {
		return true
	}
	now := map[string]string{}
	for _, m := range members {
		now[m.meta.Agent] = m.meta.Process
	}
	for _, p := range previous {
		if proc, here := now[p.Agent]; here && proc != p.Process {
			return true
		}
	}
	return false
}
