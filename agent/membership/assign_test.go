package membership

import (
	"fmt"
	"slices"
	"testing"
)

func items(n int) []Item {
	out := make([]Item, n)
	for i := range out {
		out[i] = Item{Key: fmt.Sprintf("t/%02d", i)}
	}
	return out
}

func owned(keys ...string) []Item {
	out := make([]Item, len(keys))
	for i, k := range keys {
		out[i] = Item{Key: k}
	}
	return out
}

func keys(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("t/%02d", i))
	}
	return out
}

// homed is the items of mirror a: its home (pinned or not), and n
// partitions of it.
func homed(pinned bool, n int) []Item {
	out := []Item{{Key: "mirror/a", Pinned: pinned}}
	for i := range n {
		out = append(out, Item{Key: fmt.Sprintf("p/a/%d", i), Home: "mirror/a"})
	}
	return out
}

// unplaced marks the items with a home Unplaced.
func unplaced(items []Item) []Item {
	for i := range items {
		items[i].Unplaced = items[i].Home != ""
	}
	return items
}

// hist builds a history from agent, process, item numbers..., in turn.
func hist(args ...any) map[string]Process {
	out := map[string]Process{}
	var p Process
	for i := 0; i < len(args); i++ {
		switch v := args[i].(type) {
		case string:
			p = Process{Agent: v, Process: args[i+1].(string)}
			i++
		case int:
			out[fmt.Sprintf("t/%02d", v)] = p
		}
	}
	return out
}

func TestAssign(t *testing.T) {
	for _, tc := range []struct {
		name    string
		items   []Item
		members []joined
		// want: member id → items; orphans: member id → orphans.
		want    map[string][]string
		orphans map[string][]string
		rejoin  bool
		again   bool  // Again: nothing moves, but the next round would move an item
		gen     int32 // the generation assigned
	}{{
		name:  "first round: nobody owns anything, all orphans, balanced",
		items: items(6),
		members: []joined{
			{id: "m-b", meta: memberMeta{Agent: "b"}},
			{id: "m-a", meta: memberMeta{Agent: "a"}},
		},
		want:    map[string][]string{"m-a": {"t/00", "t/02", "t/04"}, "m-b": {"t/01", "t/03", "t/05"}},
		orphans: map[string][]string{"m-a": {"t/00", "t/02", "t/04"}, "m-b": {"t/01", "t/03", "t/05"}},
	}, {
		name:  "a member joins: the owner keeps its share, the rest is revoked and given to nobody yet",
		items: items(6),
		members: []joined{
			{id: "m-a", meta: memberMeta{Agent: "a", Owned: owned(keys(0, 6)...)}},
			{id: "m-b", meta: memberMeta{Agent: "b"}},
		},
		want:   map[string][]string{"m-a": keys(0, 3), "m-b": nil},
		rejoin: true,
	}, {
		name:  "the next round: the released items go to the new member, no wait",
		items: items(6),
		members: []joined{
			{id: "m-a", meta: memberMeta{Agent: "a", Owned: owned(keys(0, 3)...), Released: keys(3, 6)}},
			{id: "m-b", meta: memberMeta{Agent: "b"}},
		},
		want: map[string][]string{"m-a": keys(0, 3), "m-b": keys(3, 6)},
	}, {
		name:  "a round before the revoked items are released (the new member's rejoin came first): still nobody's",
		items: items(6),
		members: []joined{
			{id: "m-a", meta: memberMeta{Agent: "a", Owned: owned(keys(0, 3)...), Released: keys(3, 4), Stopping: keys(4, 6)}},
			{id: "m-b", meta: memberMeta{Agent: "b"}},
		},
		want:   map[string][]string{"m-a": keys(0, 3), "m-b": keys(3, 4)},
		rejoin: true,
	}, {
		name:  "shares that cannot be equal: the member with one more keeps it (no round trip)",
		items: items(4),
		members: []joined{
			{id: "m-a", meta: memberMeta{Agent: "a", Owned: owned("t/00", "t/03")}},
			{id: "m-b", meta: memberMeta{Agent: "b", Owned: owned("t/01")}},
			{id: "m-c", meta: memberMeta{Agent: "c", Owned: owned("t/02")}},
		},
		want: map[string][]string{"m-a": {"t/00", "t/03"}, "m-b": {"t/01"}, "m-c": {"t/02"}},
	}, {
		name:  "two members within the rounded-up share, one with nothing: one item moves to it",
		items: items(4),
		members: []joined{
			{id: "m-a", meta: memberMeta{Agent: "a", Owned: owned("t/00", "t/01")}},
			{id: "m-b", meta: memberMeta{Agent: "b", Owned: owned("t/02", "t/03")}},
			{id: "m-c", meta: memberMeta{Agent: "c"}},
		},
		want:   map[string][]string{"m-a": {"t/00"}, "m-b": {"t/02", "t/03"}, "m-c": nil},
		rejoin: true,
	}, {
		name:  "measured weights a little apart, 4 items over 3 members: nothing moves (it would move back)",
		items: items(4),
		members: []joined{
			{id: "m-a", meta: memberMeta{Agent: "a", Owned: []Item{{Key: "t/00", Weight: 22925}, {Key: "t/01", Weight: 22919}}}},
			{id: "m-b", meta: memberMeta{Agent: "b", Owned: []Item{{Key: "t/02", Weight: 22929}}}},
			{id: "m-c", meta: memberMeta{Agent: "c", Owned: []Item{{Key: "t/03", Weight: 22990}}}},
		},
		want: map[string][]string{"m-a": {"t/00", "t/01"}, "m-b": {"t/02"}, "m-c": {"t/03"}},
	}, {
		name:  "a heavy item stays with its owner, which gives its light ones up",
		items: items(5),
		members: []joined{
			{id: "m-a", meta: memberMeta{Agent: "a", Owned: []Item{{Key: "t/00"}, {Key: "t/01", Weight: 1000}, {Key: "t/02"}}}},
			{id: "m-b", meta: memberMeta{Agent: "b", Owned: owned("t/03", "t/04")}},
		},
		want:   map[string][]string{"m-a": {"t/01"}, "m-b": {"t/03", "t/04"}},
		rejoin: true,
	}, {
		name:  "a measured weight travels with its item: the heavy item, moving, goes where the load is least",
		items: items(5),
		members: []joined{
			{id: "m-a", meta: memberMeta{Agent: "a", Owned: owned("t/00", "t/02"), Released: []string{"t/01"}, PreviousWeights: map[string]int64{"t/01": 1000}, PreviousGen: 7}},
			{id: "m-b", meta: memberMeta{Agent: "b", Owned: owned("t/03", "t/04")}},
			{id: "m-c", meta: memberMeta{Agent: "c"}},
		},
		want: map[string][]string{"m-a": {"t/00", "t/02"}, "m-b": {"t/03", "t/04"}, "m-c": {"t/01"}},
	}, {
		name:  "a member died: the others keep theirs and share its items as orphans",
		items: items(9),
		members: []joined{
			{id: "m-a", meta: memberMeta{Agent: "a", Owned: owned(keys(0, 3)...)}},
			{id: "m-b", meta: memberMeta{Agent: "b", Owned: owned(keys(3, 6)...)}},
		},
		want:    map[string][]string{"m-a": append(keys(0, 3), "t/06", "t/08"), "m-b": append(keys(3, 6), "t/07")},
		orphans: map[string][]string{"m-a": {"t/06", "t/08"}, "m-b": {"t/07"}},
	}, {
		name:  "weights: one heavy item balances three light ones",
		items: []Item{{Key: "heavy", Weight: 30}, {Key: "l1", Weight: 10}, {Key: "l2", Weight: 10}, {Key: "l3", Weight: 10}},
		members: []joined{
			{id: "m-a", meta: memberMeta{Agent: "a"}},
			{id: "m-b", meta: memberMeta{Agent: "b"}},
		},
		want:    map[string][]string{"m-a": {"heavy"}, "m-b": {"l1", "l2", "l3"}},
		orphans: map[string][]string{"m-a": {"heavy"}, "m-b": {"l1", "l2", "l3"}},
	}, {
		name:  "an owner's measured weight counts, not the leader's guess",
		items: items(4),
		members: []joined{
			{id: "m-a", meta: memberMeta{Agent: "a", Owned: []Item{{Key: "t/00", Weight: 100}}}},
			{id: "m-b", meta: memberMeta{Agent: "b"}},
		},
		// With the leader's weight of 1, a would get a second item.
		want:    map[string][]string{"m-a": {"t/00"}, "m-b": keys(1, 4)},
		orphans: map[string][]string{"m-b": keys(1, 4)},
	}, {
		name:  "an item two members claim is taken from both",
		items: items(2),
		members: []joined{
			{id: "m-a", meta: memberMeta{Agent: "a", Owned: owned("t/00", "t/01")}},
			{id: "m-b", meta: memberMeta{Agent: "b", Owned: owned("t/01")}},
		},
		want:   map[string][]string{"m-a": {"t/00"}, "m-b": nil},
		rejoin: true,
	}, {
		name:  "an item the leader does not know yet stays with its owner",
		items: items(2),
		members: []joined{
			{id: "m-a", meta: memberMeta{Agent: "a", Owned: owned("new/0")}},
			{id: "m-b", meta: memberMeta{Agent: "b"}},
		},
		want:    map[string][]string{"m-a": {"new/0", "t/01"}, "m-b": {"t/00"}},
		orphans: map[string][]string{"m-a": {"t/01"}, "m-b": {"t/00"}},
	}, {
		name:  "a complete history without the new items: nobody waits for them",
		items: items(6),
		gen:   5,
		members: []joined{
			{id: "m-a", meta: memberMeta{Agent: "a", Process: "pa", Previous: []MemberLoad{{Agent: "a"}, {Agent: "b"}}, PreviousGen: 4, PreviousHistory: hist("a", "pa", 0, 1, "b", "pb", 2, 3), PreviousComplete: true, Owned: owned("t/00", "t/01")}},
			{id: "m-b", meta: memberMeta{Agent: "b", Process: "pb", Previous: []MemberLoad{{Agent: "a"}, {Agent: "b"}}, PreviousGen: 4, PreviousHistory: hist("a", "pa", 0, 1, "b", "pb", 2, 3), PreviousComplete: true, Owned: owned("t/02", "t/03")}},
		},
		want: map[string][]string{"m-a": {"t/00", "t/01", "t/04"}, "m-b": {"t/02", "t/03", "t/05"}},
	}, {
		name:  "an orphan whose last owner is gone from the group: written at once",
		items: items(4),
		gen:   5,
		members: []joined{
			{id: "m-a", meta: memberMeta{Agent: "a", Process: "pa", Previous: []MemberLoad{{Agent: "a"}, {Agent: "c"}}, PreviousGen: 4, PreviousHistory: hist("a", "pa", 0, 1, "c", "pc", 2, 3), PreviousComplete: true, Owned: owned("t/00", "t/01")}},
			{id: "m-b", meta: memberMeta{Agent: "b", Process: "pb"}},
		},
		want: map[string][]string{"m-a": {"t/00", "t/01"}, "m-b": {"t/02", "t/03"}},
	}, {
		name:  "an orphan whose last owner's agent is here as another process: waited out",
		items: items(4),
		gen:   5,
		members: []joined{
			{id: "m-a", meta: memberMeta{Agent: "a", Process: "pa", Previous: []MemberLoad{{Agent: "a"}, {Agent: "c"}}, PreviousGen: 4, PreviousHistory: hist("a", "pa", 0, 1, "c", "pc", 2, 3), PreviousComplete: true, Owned: owned("t/00", "t/01")}},
			{id: "m-c", meta: memberMeta{Agent: "c", Process: "pc2"}},
		},
		want:    map[string][]string{"m-a": {"t/00", "t/01"}, "m-c": {"t/02", "t/03"}},
		orphans: map[string][]string{"m-c": {"t/02", "t/03"}},
	}, {
		name:  "a history that lost items (not complete): an item not in it is waited out",
		items: items(3),
		gen:   6,
		members: []joined{
			{id: "m-a", meta: memberMeta{Agent: "a", Process: "pa", Previous: []MemberLoad{{Agent: "a"}}, PreviousGen: 5, PreviousHistory: hist("a", "pa", 0), Owned: owned("t/00")}},
			{id: "m-b", meta: memberMeta{Agent: "b", Process: "pb"}},
		},
		want:    map[string][]string{"m-a": {"t/00", "t/02"}, "m-b": {"t/01"}},
		orphans: map[string][]string{"m-a": {"t/02"}, "m-b": {"t/01"}},
	}, {
		name:  "a generation between that nobody here was assigned in, and a member new since: every orphan is waited out",
		items: items(3),
		gen:   6,
		members: []joined{
			{id: "m-a", meta: memberMeta{Agent: "a", Process: "pa", Previous: []MemberLoad{{Agent: "a", Process: "pa"}}, PreviousGen: 4, PreviousHistory: hist("a", "pa", 0), PreviousComplete: true, Owned: owned("t/00")}},
			{id: "m-b", meta: memberMeta{Agent: "b", Process: "pb"}},
		},
		want:    map[string][]string{"m-a": {"t/00", "t/02"}, "m-b": {"t/01"}},
		orphans: map[string][]string{"m-a": {"t/02"}, "m-b": {"t/01"}},
	}, {
		name:  "a generation between that nobody here was assigned in, every member here was in the last one known: its history holds",
		items: items(3),
		gen:   6,
		members: []joined{
			{id: "m-a", meta: memberMeta{Agent: "a", Process: "pa", Previous: []MemberLoad{{Agent: "a", Process: "pa"}, {Agent: "b", Process: "pb"}}, PreviousGen: 4, PreviousHistory: hist("a", "pa", 0, "c", "pc", 1), PreviousComplete: true, Owned: owned("t/00")}},
			{id: "m-b", meta: memberMeta{Agent: "b", Process: "pb", Previous: []MemberLoad{{Agent: "a", Process: "pa"}, {Agent: "b", Process: "pb"}}, PreviousGen: 3}},
		},
		want: map[string][]string{"m-a": {"t/00", "t/02"}, "m-b": {"t/01"}},
	}, {
		name:  "a new group's first generation: nothing was ever owned, nobody waits",
		items: items(2),
		gen:   1,
		members: []joined{
			{id: "m-a", meta: memberMeta{Agent: "a", Process: "pa"}},
		},
		want: map[string][]string{"m-a": {"t/00", "t/01"}},
	}, {
		// The member alone created the mirror and runs its partitions as
		// part of it when the other joins.
		name:  "a new item goes to its home's owner, not to the least loaded member; out of balance, the leader asks for another round",
		items: homed(false, 2),
		gen:   5,
		members: []joined{
			{id: "m-a", meta: memberMeta{Agent: "a", Process: "pa", Previous: []MemberLoad{{Agent: "a", Process: "pa"}}, PreviousGen: 4, PreviousHistory: map[string]Process{"mirror/a": {"a", "pa"}}, PreviousComplete: true, Owned: owned("mirror/a")}},
			{id: "m-b", meta: memberMeta{Agent: "b", Process: "pb"}},
		},
		want:  map[string][]string{"m-a": {"mirror/a", "p/a/0", "p/a/1"}, "m-b": nil},
		again: true,
	}, {
		name:  "the next round: the new items, owned now, move for balance",
		items: homed(false, 2),
		gen:   6,
		members: []joined{
			{id: "m-a", meta: memberMeta{Agent: "a", Process: "pa", Previous: []MemberLoad{{Agent: "a", Process: "pa"}, {Agent: "b", Process: "pb"}}, PreviousGen: 5,
				PreviousHistory: map[string]Process{"mirror/a": {"a", "pa"}, "p/a/0": {"a", "pa"}, "p/a/1": {"a", "pa"}}, PreviousComplete: true, Owned: owned("mirror/a", "p/a/0", "p/a/1")}},
			{id: "m-b", meta: memberMeta{Agent: "b", Process: "pb"}},
		},
		want:   map[string][]string{"m-a": {"mirror/a", "p/a/0"}, "m-b": nil},
		rejoin: true,
	}, {
		name:  "and the round after: the released item goes to the other member, and the group is settled",
		items: homed(false, 2),
		gen:   7,
		members: []joined{
			{id: "m-a", meta: memberMeta{Agent: "a", Process: "pa", Previous: []MemberLoad{{Agent: "a", Process: "pa"}, {Agent: "b", Process: "pb"}}, PreviousGen: 6,
				PreviousHistory: map[string]Process{"mirror/a": {"a", "pa"}, "p/a/0": {"a", "pa"}, "p/a/1": {"a", "pa"}}, PreviousComplete: true, Owned: owned("mirror/a", "p/a/0"), Released: []string{"p/a/1"}}},
			{id: "m-b", meta: memberMeta{Agent: "b", Process: "pb"}},
		},
		want: map[string][]string{"m-a": {"mirror/a", "p/a/0"}, "m-b": {"p/a/1"}},
	}, {
		name:  "balancing moves the items, never a home that has items",
		items: homed(false, 2),
		members: []joined{
			{id: "m-a", meta: memberMeta{Agent: "a", Owned: []Item{{Key: "mirror/a", Weight: 1}, {Key: "p/a/0", Weight: 10}, {Key: "p/a/1", Weight: 10}}}},
			{id: "m-b", meta: memberMeta{Agent: "b"}},
		},
		// The home is the lightest; moving it first would leave a with
		// both partitions after one more move.
		want:   map[string][]string{"m-a": {"mirror/a", "p/a/0"}, "m-b": nil},
		rejoin: true,
	}, {
		name:  "a pinned home takes its items back from other members",
		items: homed(true, 2),
		members: []joined{
			{id: "m-a", meta: memberMeta{Agent: "a", Owned: owned("mirror/a", "p/a/0")}},
			{id: "m-b", meta: memberMeta{Agent: "b", Owned: owned("p/a/1")}},
		},
		want:   map[string][]string{"m-a": {"mirror/a", "p/a/0"}, "m-b": nil},
		rejoin: true,
	}, {
		name:  "the next round: a pinned home's released item goes to its owner, and balancing moves none of them",
		items: homed(true, 2),
		members: []joined{
			{id: "m-a", meta: memberMeta{Agent: "a", Owned: owned("mirror/a", "p/a/0")}},
			{id: "m-b", meta: memberMeta{Agent: "b", Released: []string{"p/a/1"}}},
		},
		want: map[string][]string{"m-a": {"mirror/a", "p/a/0", "p/a/1"}, "m-b": nil},
	}, {
		name:  "a new item whose home is between owners goes to nobody yet",
		items: homed(false, 1),
		gen:   1,
		members: []joined{
			{id: "m-a", meta: memberMeta{Agent: "a", Owned: owned("mirror/a")}},
			{id: "m-b", meta: memberMeta{Agent: "b", Owned: owned("mirror/a")}},
		},
		want:   map[string][]string{"m-a": nil, "m-b": nil},
		rejoin: true,
	}, {
		name:  "an item owned before, orphaned, goes to the least loaded member, not its home's owner",
		items: homed(false, 2),
		gen:   5,
		members: []joined{
			{id: "m-a", meta: memberMeta{Agent: "a", Process: "pa", Previous: []MemberLoad{{Agent: "a", Process: "pa"}, {Agent: "c", Process: "pc"}}, PreviousGen: 4,
				PreviousHistory: map[string]Process{"mirror/a": {"a", "pa"}, "p/a/0": {"c", "pc"}, "p/a/1": {"c", "pc"}}, PreviousComplete: true, Owned: owned("mirror/a")}},
			{id: "m-b", meta: memberMeta{Agent: "b", Process: "pb"}},
		},
		want: map[string][]string{"m-a": {"mirror/a", "p/a/1"}, "m-b": {"p/a/0"}},
	}, {
		name:  "unplaced items go to the least loaded members at once, no wait",
		items: unplaced(homed(false, 3)),
		gen:   5,
		members: []joined{
			{id: "m-a", meta: memberMeta{Version: 2, Agent: "a", Process: "pa", Previous: []MemberLoad{{Agent: "a", Process: "pa"}}, PreviousGen: 4, PreviousHistory: map[string]Process{"mirror/a": {"a", "pa"}}, PreviousComplete: true, Owned: owned("mirror/a")}},
			{id: "m-b", meta: memberMeta{Version: 2, Agent: "b", Process: "pb"}},
			{id: "m-c", meta: memberMeta{Version: 2, Agent: "c", Process: "pc"}},
		},
		want: map[string][]string{"m-a": {"mirror/a", "p/a/2"}, "m-b": {"p/a/0"}, "m-c": {"p/a/1"}},
	}, {
		name:  "unplaced items while a member may run them with their home (an older version): to the home's owner",
		items: unplaced(homed(false, 2)),
		gen:   5,
		members: []joined{
			{id: "m-a", meta: memberMeta{Version: 2, Agent: "a", Process: "pa", Previous: []MemberLoad{{Agent: "a", Process: "pa"}}, PreviousGen: 4, PreviousHistory: map[string]Process{"mirror/a": {"a", "pa"}}, PreviousComplete: true, Owned: owned("mirror/a")}},
			{id: "m-b", meta: memberMeta{Version: 1, Agent: "b", Process: "pb"}},
		},
		want:  map[string][]string{"m-a": {"mirror/a", "p/a/0", "p/a/1"}, "m-b": nil},
		again: true, // out of balance: next round moves one
	}, {
		name:  "unplaced items of a pinned home: to the home's owner",
		items: unplaced(homed(true, 2)),
		gen:   5,
		members: []joined{
			{id: "m-a", meta: memberMeta{Version: 2, Agent: "a", Process: "pa", Previous: []MemberLoad{{Agent: "a", Process: "pa"}}, PreviousGen: 4, PreviousHistory: map[string]Process{"mirror/a": {"a", "pa"}}, PreviousComplete: true, Owned: owned("mirror/a")}},
			{id: "m-b", meta: memberMeta{Version: 2, Agent: "b", Process: "pb"}},
		},
		want: map[string][]string{"m-a": {"mirror/a", "p/a/0", "p/a/1"}, "m-b": nil},
	}, {
		name:  "unplaced items whose home ran in a process that may still write: orphans wherever they go",
		items: unplaced(homed(false, 2)),
		gen:   5,
		members: []joined{
			{id: "m-a", meta: memberMeta{Version: 2, Agent: "a", Process: "pa2", Owned: owned("mirror/a")}},
			{id: "m-b", meta: memberMeta{Version: 2, Agent: "b", Process: "pb", Previous: []MemberLoad{{Agent: "a", Process: "pa"}, {Agent: "b", Process: "pb"}}, PreviousGen: 4, PreviousHistory: map[string]Process{"mirror/a": {"a", "pa"}}, PreviousComplete: true}},
		},
		want:    map[string][]string{"m-a": {"mirror/a", "p/a/1"}, "m-b": {"p/a/0"}},
		orphans: map[string][]string{"m-a": {"p/a/1"}, "m-b": {"p/a/0"}},
	}, {
		name:  "new partitions weigh what measured ones do on average: spread over members of unequal load",
		items: append([]Item{{Key: "mirror/x"}, {Key: "p/x/0", Home: "mirror/x"}, {Key: "p/x/1", Home: "mirror/x"}}, unplaced(homed(false, 4))...),
		gen:   5,
		members: []joined{
			{id: "m-a", meta: memberMeta{Version: 2, Agent: "a", Process: "pa", Previous: []MemberLoad{{Agent: "a", Process: "pa"}, {Agent: "b", Process: "pb"}}, PreviousGen: 4,
				PreviousHistory: map[string]Process{"mirror/x": {"a", "pa"}, "p/x/0": {"a", "pa"}, "p/x/1": {"b", "pb"}, "mirror/a": {"b", "pb"}}, PreviousComplete: true,
				Owned: []Item{{Key: "mirror/x"}, {Key: "p/x/0", Weight: 1000}}}},
			{id: "m-b", meta: memberMeta{Version: 2, Agent: "b", Process: "pb", Owned: []Item{{Key: "mirror/a"}, {Key: "p/x/1", Weight: 900}}}},
		},
		want: map[string][]string{"m-a": {"mirror/x", "p/a/1", "p/a/3", "p/x/0"}, "m-b": {"mirror/a", "p/a/0", "p/a/2", "p/x/1"}},
	}, {
		name:  "the next round: new partitions not measured yet keep the guess, and nothing moves",
		items: append([]Item{{Key: "mirror/x"}, {Key: "p/x/0", Home: "mirror/x"}, {Key: "p/x/1", Home: "mirror/x"}}, homed(false, 4)...),
		gen:   6,
		members: []joined{
			{id: "m-a", meta: memberMeta{Version: 2, Agent: "a", Process: "pa", Owned: []Item{{Key: "mirror/x"}, {Key: "p/x/0", Weight: 1000}, {Key: "p/a/1"}, {Key: "p/a/3"}}}},
			{id: "m-b", meta: memberMeta{Version: 2, Agent: "b", Process: "pb", Owned: []Item{{Key: "mirror/a"}, {Key: "p/x/1", Weight: 900}, {Key: "p/a/0"}, {Key: "p/a/2"}}}},
		},
		want: map[string][]string{"m-a": {"mirror/x", "p/a/1", "p/a/3", "p/x/0"}, "m-b": {"mirror/a", "p/a/0", "p/a/2", "p/x/1"}},
	}, {
		name:  "revoked items are moving: told to every member, so the next generation knows them",
		items: items(4),
		gen:   3,
		members: []joined{
			{id: "m-a", meta: memberMeta{Agent: "a", Owned: owned(keys(0, 4)...)}},
			{id: "m-b", meta: memberMeta{Agent: "b"}},
		},
		want:   map[string][]string{"m-a": keys(0, 2), "m-b": nil},
		rejoin: true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := assign(tc.items, slices.Clone(tc.members), tc.gen)
			seen := map[string]string{}
			for _, m := range tc.members {
				a, ok := got[m.id]
				if !ok {
					t.Fatalf("member %s has no assignment", m.id)
				}
				if !slices.Equal(a.Items, tc.want[m.id]) {
					t.Errorf("member %s: items %v, want %v", m.id, a.Items, tc.want[m.id])
				}
				if !slices.Equal(a.Orphans, tc.orphans[m.id]) {
					t.Errorf("member %s: orphans %v, want %v", m.id, a.Orphans, tc.orphans[m.id])
				}
				// The history names the owner of every item owned now.
				for _, k := range a.Items {
					if a.History[k].Agent != m.meta.Agent || a.History[k].Process != m.meta.Process {
						t.Errorf("member %s: history of %s is %+v, want its owner", m.id, k, a.History[k])
					}
				}
				if a.Rejoin != tc.rejoin {
					t.Errorf("member %s: rejoin %v, want %v", m.id, a.Rejoin, tc.rejoin)
				}
				if a.Again != tc.again {
					t.Errorf("member %s: again %v, want %v", m.id, a.Again, tc.again)
				}
				if len(a.Members) != len(tc.members) {
					t.Errorf("member %s: %d member loads, want %d", m.id, len(a.Members), len(tc.members))
				}
				for _, k := range a.Items {
					if other, dup := seen[k]; dup {
						t.Errorf("item %s assigned to %s and %s", k, other, m.id)
					}
					seen[k] = m.id
				}
			}
		})
	}
}

// TestAssignWaiting: an item a member lost while waiting out an earlier
// owner keeps its long wait with its next owner, and only there.
func TestAssignWaiting(t *testing.T) {
	prev := []MemberLoad{{Agent: "a", Process: "p1"}, {Agent: "b", Process: "p2"}}
	h := hist("a", "p1", 0, "b", "p2", 1, "c", "p3", 2, 3)
	got := assign(items(4), []joined{
		{id: "m-a", meta: memberMeta{Agent: "a", Process: "p1", Previous: prev, PreviousGen: 3, PreviousHistory: h, PreviousComplete: true, Owned: owned("t/00"), Waiting: []string{"t/02"}}},
		{id: "m-b", meta: memberMeta{Agent: "b", Process: "p2", Previous: prev, PreviousGen: 3, PreviousHistory: h, PreviousComplete: true, Owned: owned("t/01")}},
	}, 4)
	for id, a := range got {
		// t/03's last owner c is gone: no wait; t/02 was lost waiting.
		if slices.Contains(a.Items, "t/02") != slices.Contains(a.Orphans, "t/02") || slices.Contains(a.Orphans, "t/03") {
			t.Errorf("member %s: items %v, orphans %v; want the wait exactly where t/02 goes", id, a.Items, a.Orphans)
		}
	}
}

// TestAssignForgetsGoneItems: the history forgets an item no longer
// assigned once its last process is gone from the group or here without
// claiming it, and keeps it while its agent is here as another process (a
// re-created item would wait that earlier process out).
func TestAssignForgetsGoneItems(t *testing.T) {
	prev := []MemberLoad{{Agent: "a", Process: "p1"}, {Agent: "b", Process: "p2"}}
	// t/00 and t/01 are items; t/02 (last owner c, gone), t/03 (a, here
	// as the same process) and t/04 (b, here as a new process) are not.
	h := hist("a", "p1", 0, 3, "b", "p2", 1, 4, "c", "p3", 2)
	got := assign(items(2), []joined{
		{id: "m-a", meta: memberMeta{Agent: "a", Process: "p1", Previous: prev, PreviousGen: 3, PreviousHistory: h, PreviousComplete: true, Owned: owned("t/00")}},
		{id: "m-b", meta: memberMeta{Agent: "b", Process: "p5", Previous: prev, PreviousGen: 3, PreviousHistory: h, PreviousComplete: true}},
	}, 4)
	for id, a := range got {
		var ks []string
		for k := range a.History {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		if want := []string{"t/00", "t/01", "t/04"}; !slices.Equal(ks, want) {
			t.Errorf("member %s: history of %v, want %v", id, ks, want)
		}
		if p := a.History["t/04"]; p != (Process{Agent: "b", Process: "p2"}) {
			t.Errorf("member %s: t/04 last owned by %+v, want b's earlier process p2", id, p)
		}
	}
}

// TestAssignWeightsTravel: a weight measured by an item's last owner
// counts where the item goes next, until its new owner measures it, and
// the assignment tells it on for the next generation.
func TestAssignWeightsTravel(t *testing.T) {
	got := assign(items(5), []joined{
		{id: "m-a", meta: memberMeta{Agent: "a", Owned: owned("t/00", "t/02"), Released: []string{"t/01"}, PreviousWeights: map[string]int64{"t/01": 1000}, PreviousGen: 7}},
		{id: "m-b", meta: memberMeta{Agent: "b", Owned: owned("t/03", "t/04")}},
		{id: "m-c", meta: memberMeta{Agent: "c", Owned: []Item{{Key: "t/01", Weight: 0}}}},
	}, 8)
	a := got["m-c"]
	if !slices.Equal(a.Items, []string{"t/01"}) || a.Weights["t/01"] != 1000 {
		t.Fatalf("c: items %v, weights %v; want t/01 kept, weighing 1000 (not measured by c yet)", a.Items, a.Weights)
	}
	for _, l := range a.Members {
		if l.Agent == "c" && l.Weight != 1000 {
			t.Errorf("c's load %d, want 1000", l.Weight)
		}
	}
	// Measured by c, its own figure counts.
	got = assign(items(5), []joined{
		{id: "m-c", meta: memberMeta{Agent: "c", Owned: []Item{{Key: "t/01", Weight: 40}}, PreviousWeights: map[string]int64{"t/01": 1000}, PreviousGen: 8}},
	}, 9)
	if w := got["m-c"].Weights["t/01"]; w != 40 {
		t.Errorf("t/01 weighs %d after its owner measured 40", w)
	}
}

// TestAssignGuessIsNotMeasured: the weight guessed for a new partition is
// not told back as a measured one (the members' next PreviousWeights),
// while measured weights are.
func TestAssignGuessIsNotMeasured(t *testing.T) {
	items := append([]Item{{Key: "mirror/x"}, {Key: "p/x/0", Home: "mirror/x"}}, unplaced(homed(false, 1))...)
	members := []joined{
		{id: "m-a", meta: memberMeta{Version: 2, Agent: "a", Owned: []Item{{Key: "mirror/x"}, {Key: "p/x/0", Weight: 1000}, {Key: "mirror/a"}}}},
		{id: "m-b", meta: memberMeta{Version: 2, Agent: "b"}},
	}
	got := assign(items, members, 3)
	for id, a := range got {
		if w, ok := a.Weights["p/a/0"]; ok {
			t.Errorf("%s: the guessed weight of p/a/0 (%d) is told back as measured", id, w)
		}
		if a.Weights["p/x/0"] != 1000 {
			t.Errorf("%s: measured weights %v, want p/x/0's 1000", id, a.Weights)
		}
	}
	if !slices.Contains(got["m-b"].Items, "p/a/0") {
		t.Errorf("p/a/0, guessed at 1000, went to %v, want the member without load", got)
	}
}
