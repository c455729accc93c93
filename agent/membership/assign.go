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
	// Home is the key of the item this one belongs to (a partition's
	// mirror), whose owner does its work until the item exists (a new
	// partition runs with its mirror until it is an item of its own). So
	// a new item goes to its home's owner, never elsewhere while its home
	// is between owners; and homes that have items move only with their
	// owner. The leader's Items say it; members do not tell it back.
	Home string `json:"-"`
	// Pinned, on a home, keeps every item of it with the home's owner: a
	// mirror under a lifecycle operation runs on one agent.
	Pinned bool `json:"-"`
	// Unplaced, on an item with a Home, says its home's owner holds it
	// back for the group to place: it never ran, so it may go to any
	// member at once, where it will run, rather than to the home's
	// owner, which would then hand it on.
	Unplaced bool `json:"-"`
}

func (it Item) weight() int64 { return max(it.Weight, 1) }

// memberMeta is what a member says of itself when it joins.
type memberMeta struct {
	// Version is the member's protocol: from placeVersion on, a home's
	// owner never runs an Unplaced item it was not given.
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
	// PreviousHistory is that generation's History, and PreviousComplete
	// its Complete.
	PreviousHistory  map[string]Process `json:"previous_history,omitempty"`
	PreviousComplete bool               `json:"previous_complete,omitempty"`
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
	// Stopping are items it lost and has not released yet: writes of
	// them may still be in flight, so nobody gets them this round (a
	// member asked to rejoin by another's release may rejoin before its
	// own stops returned).
	Stopping []string `json:"stopping,omitempty"`
}

// metaVersion is the version members join with; placeVersion the first
// that holds Unplaced items back (memberMeta.Version).
const (
	metaVersion  = 2
	placeVersion = 2
)

// assignment is what the leader gives one member.
type assignment struct {
	Version int `json:"v"`
	// Items are the member's items this generation.
	Items []string `json:"items,omitempty"`
	// Orphans are those of Items whose last owner may still be inside
	// its session: the member waits the session before it writes them
	// (see wait).
	Orphans []string `json:"orphans,omitempty"`
	// Rejoin: some items move from one member to another this round; each
	// member rejoins once it has stopped what it lost, and the next round
	// hands them on.
	Rejoin bool `json:"rejoin,omitempty"`
	// Again, for the leader that made it: nothing moves this round, but
	// the next would move an item for balance; the leader rejoins at once
	// (a leader's rejoin rebalances the group).
	Again bool `json:"-"`
	// Members are the agents of the generation and how many items each
	// has, for status.
	Members []MemberLoad `json:"members,omitempty"`
	// Owners are the agent ids of the owners of the generation's items,
	// for calls to be forwarded to them.
	Owners map[string]string `json:"owners,omitempty"`
	// History is the process that last owned each item, in this
	// generation or, for an item nobody owns in it, an earlier one;
	// Complete says that it holds every item any process of the group
	// ever owned (the chain of generations it was carried along is
	// unbroken from the group's first). Members tell them back at their
	// next join.
	History  map[string]Process `json:"history,omitempty"`
	Complete bool               `json:"complete,omitempty"`
	// Weights are the measured weights (above 1) of the generation's
	// items, told back by the members at their next join.
	Weights map[string]int64 `json:"weights,omitempty"`
}

// Process is one process of an agent.
type Process struct {
	Agent   string `json:"a"`
	Process string `json:"p,omitempty"`
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
//   - Items nobody owns go to the least loaded member, heaviest first.
//     Those no member released are orphans, which the new owner waits out
//     for a session before its first write, unless the group's history
//     shows that no process that may still write them exists (mustWait).
//   - Items with a Home: one nobody ever owned (not in the history), or
//     whose home is Pinned, goes to its home's owner instead, and to
//     nobody while its home is between owners; but for one Unplaced of a
//     home not pinned, while every member holds Unplaced items back
//     (placeVersion): that goes to the least loaded member like any
//     other, and is an orphan wherever its home would be one (a process
//     that may still write it ran the home). An item of a pinned home
//     owned by another member is taken from it. Balancing moves neither
//     the items of a pinned home nor a home that has items.
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
	homeOf, pinned, unplaced := map[string]string{}, map[string]bool{}, map[string]bool{}
	place := !slices.ContainsFunc(members, func(m joined) bool { return m.meta.Version < placeVersion })
	for _, it := range items {
		if _, dup := weights[it.Key]; dup {
			continue
		}
		weights[it.Key] = it.weight()
		if it.Home != "" {
			homeOf[it.Key] = it.Home
		}
		if it.Pinned {
			pinned[it.Key] = true
		}
		if it.Unplaced && it.Home != "" && place {
			unplaced[it.Key] = true
		}
	}
	fixed := fixedItems(items)
	// Weights measured earlier travel with their items; the owners'
	// measurements replace them, and the leader's guess.
	measured := map[string]bool{}
	for k, w := range previousWeights(members) {
		if _, ok := weights[k]; ok {
			weights[k] = w
			measured[k] = true
		}
	}
	claims := map[string]int{}
	released, waiting, stopping := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, m := range members {
		for _, k := range m.meta.Waiting {
			waiting[k] = true
		}
		for _, k := range m.meta.Stopping {
			stopping[k] = true
		}
		for _, it := range m.meta.Owned {
			// An item the leader does not know yet (its view of the
			// mirrors lags the owner's) stays with its owner; an owner
			// stops an item whose mirror went, and claims it no more.
			if _, ok := weights[it.Key]; !ok || it.Weight > 0 {
				weights[it.Key] = it.weight()
			}
			if it.Weight > 0 {
				measured[it.Key] = true
			}
			claims[it.Key]++
		}
		for _, k := range m.meta.Released {
			released[k] = true
		}
	}
	guessed := guessUnmeasured(weights, homeOf, measured)
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
	// The items of a pinned home that another member owns are taken from
	// it, and given to the home's owner next round.
	homeAt := placedAt(mine)
	for i := range mine {
		var keep []string
		for _, k := range mine[i] {
			if h := homeOf[k]; pinned[h] {
				if at, ok := homeAt[h]; ok && at != i {
					load[i] -= weights[k]
					moving = true
					continue
				}
			}
			keep = append(keep, k)
		}
		mine[i] = keep
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
	var rest []int64
	for k, w := range weights {
		if !placed[k] {
			rest = append(rest, w)
		}
	}
	slices.SortFunc(rest, func(a, b int64) int { return cmp.Compare(b, a) })
	for _, w := range rest {
		kept[slices.Index(kept, slices.Min(kept))] += w
	}
	for {
		hi, lo := extremes(kept)
		if len(mine[hi]) < 2 {
			break
		}
		last := len(mine[hi]) - 1
		for last >= 0 && fixed[mine[hi][last]] {
			last--
		}
		if last < 0 {
			break
		}
		k := mine[hi][last] // the lightest that may move, as owned was sorted
		w := weights[k]
		if !worthMoving(kept[hi], kept[lo], w) {
			break
		}
		mine[hi] = slices.Delete(mine[hi], last, last+1)
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
	for k := range stopping {
		if _, item := weights[k]; item && !placed[k] {
			placed[k] = true // handed on once its last owner released it
			moving = true
		}
	}
	var free []string
	for k := range weights {
		if !placed[k] {
			free = append(free, k)
		}
	}
	// Homes first: the items placed with them follow.
	hasHome := func(k string) int {
		if homeOf[k] != "" {
			return 1
		}
		return 0
	}
	slices.SortFunc(free, func(a, b string) int {
		return cmp.Or(cmp.Compare(hasHome(a), hasHome(b)), -cmp.Compare(weights[a], weights[b]), cmp.Compare(a, b))
	})
	hist, complete := previousHistory(members, gen)
	here := map[string]string{} // agent → its process in this generation
	for _, m := range members {
		here[m.meta.Agent] = m.meta.Process
	}
	orphans := make([][]string, len(members))
	homeAt = placedAt(mine)
	for _, k := range free {
		i := -1
		h := homeOf[k]
		if h != "" {
			if _, ever := hist[k]; (!ever && !unplaced[k]) || pinned[h] {
				at, ok := homeAt[h]
				_, known := weights[h]
				switch {
				case ok:
					i = at
				case known:
					// Its home is between owners, one of which may
					// run it as part of the home: next round.
					moving = true
					continue
				}
			}
		}
		if i < 0 {
			i = 0
			for j := range members {
				if load[j] < load[i] {
					i = j
				}
			}
		}
		load[i] += weights[k]
		mine[i] = append(mine[i], k)
		homeAt[k] = i
		orphan := mustWait(k, hist, complete, here, waiting)
		if unplaced[k] && !pinned[h] {
			orphan = orphan || mustWait(h, hist, complete, here, waiting)
		}
		if !released[k] && orphan {
			orphans[i] = append(orphans[i], k)
		}
	}
	// New items placed with their homes' owners can leave the group out
	// of balance (an agent alone created mirrors, and others joined as
	// their partitions became items): the balancing above counted them
	// with the least loaded member. Nothing else would ask for the
	// rebalance that moves them (a member asks only when its measurements
	// differ from the generation's, and the members rejoin for Rejoin
	// once those that lost items released them, here none), so the
	// leader asks: next round they are owned, and balancing moves them.
	again := false
	if !moving {
		final := make([][]weighed, len(members))
		for i := range mine {
			for _, k := range mine[i] {
				final[i] = append(final[i], weighed{weights[k], fixed[k]})
			}
		}
		again = wouldMove(final)
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
	// The history goes on: items owned now, by their owners (revoked
	// ones are still their owners' until released); the others keep
	// their last owner, but for items gone (deleted mirrors) whose last
	// process is gone from the group or here and not claiming them: what
	// mustWait would say of such an entry, a complete history without it
	// says too, and an incomplete one waits, so only entries that make a
	// next owner wait are kept, and the history does not grow with every
	// mirror ever deleted.
	next := make(map[string]Process, len(hist)+len(weights))
	for k, p := range hist {
		if _, item := weights[k]; !item {
			if proc, present := here[p.Agent]; !present || proc == p.Process {
				continue
			}
		}
		next[k] = p
	}
	for _, m := range members {
		for _, it := range m.meta.Owned {
			next[it.Key] = Process{Agent: m.meta.Agent, Process: m.meta.Process}
		}
	}
	for i, m := range members {
		for _, k := range mine[i] {
			next[k] = Process{Agent: m.meta.Agent, Process: m.meta.Process}
		}
	}
	told := map[string]int64{} // the weights told back: measured, not guessed
	for k, w := range weights {
		if w > 1 && !guessed[k] {
			told[k] = w
		}
	}
	for i, m := range members {
		slices.Sort(mine[i])
		slices.Sort(orphans[i])
		out[m.id] = assignment{Version: 1, Items: mine[i], Orphans: orphans[i], Rejoin: moving, Again: again, Members: loads, Owners: owners, Weights: told, History: next, Complete: complete}
	}
	return out
}

// guessUnmeasured gives each item with a home that no member measured yet
// (a new partition, placed or not) the mean weight of those measured: at
// 1 beside byte rates, every new partition would go to the least loaded
// member, and move again once measured. Measured are the weights members
// told back (PreviousWeights) and report for what they own (Weight above
// 0; an idle item measures 1).
// It returns the items it guessed, whose weights are not told back as
// measured.
func guessUnmeasured(weights map[string]int64, homeOf map[string]string, measured map[string]bool) (guessed map[string]bool) {
	var sum, n int64
	for k := range measured {
		if _, ok := homeOf[k]; ok && weights[k] > 1 {
			sum, n = sum+weights[k], n+1
		}
	}
	if n == 0 {
		return nil
	}
	guessed = map[string]bool{}
	for k := range homeOf {
		if !measured[k] {
			weights[k] = sum / n
			guessed[k] = true
		}
	}
	return guessed
}

// fixedItems are the items balancing never moves: homes that have items,
// and the items of pinned homes.
func fixedItems(items []Item) map[string]bool {
	pinned := map[string]bool{}
	for _, it := range items {
		if it.Pinned {
			pinned[it.Key] = true
		}
	}
	fixed := map[string]bool{}
	for _, it := range items {
		if it.Home != "" {
			fixed[it.Home] = true
			if pinned[it.Home] {
				fixed[it.Key] = true
			}
		}
	}
	return fixed
}

// placedAt is the member each item of mine is placed with.
func placedAt(mine [][]string) map[string]int {
	at := map[string]int{}
	for i, ks := range mine {
		for _, k := range ks {
			at[k] = i
		}
	}
	return at
}

// mustWait says whether the next owner of item k, which its last owner did
// not release, waits the session before it writes it: unless the history
// says who last owned it and that process is gone from the group (removed
// by the coordinator, a session after the last request it received; or it
// left, after its writes returned), or, complete, that nobody ever did.
// A last owner whose agent is here as another process was fenced out by
// that process's join while maybe inside its session; one lost by a member
// still waiting out an earlier owner (waiting) is waited out as long.
func mustWait(k string, hist map[string]Process, complete bool, here map[string]string, waiting map[string]bool) bool {
	if waiting[k] {
		return true
	}
	last, ok := hist[k]
	if !ok {
		return !complete
	}
	proc, present := here[last.Agent]
	return present && proc != last.Process
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

// previousHistory is the group's history as the member here assigned most
// recently tells it (generation g); when it is not known (no member here
// was), it is empty and not complete, so that every orphan is waited out. A history older than gen-1 holds nothing of the generations between,
// where an item may have been owned by a process that has since been
// replaced by another of its agent id: it is known only when every member
// here was a member of g, as the same process (those of the generations
// between that are not here were removed, or left, and stopped writing
// before). A new group's first generation knows its history: nobody ever
// owned anything.
func previousHistory(members []joined, gen int32) (hist map[string]Process, complete bool) {
	var newest *memberMeta
	for i := range members {
		m := &members[i].meta
		if len(m.Previous) > 0 && (newest == nil || m.PreviousGen > newest.PreviousGen) {
			newest = m
		}
	}
	if newest == nil {
		return nil, gen == 1
	}
	if newest.PreviousGen != gen-1 {
		for _, m := range members {
			if !slices.ContainsFunc(newest.Previous, func(l MemberLoad) bool {
				return l.Agent == m.meta.Agent && l.Process == m.meta.Process
			}) {
				return nil, false
			}
		}
	}
	return newest.PreviousHistory, newest.PreviousComplete
}
