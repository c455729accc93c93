package membership

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// TestBalanceAgreesWithLeader builds a generation with assign, lets agent a
// measure its items, and checks that a asks for a rebalance exactly when
// the leader, given those measurements at the next join, moves an item.
func TestBalanceAgreesWithLeader(t *testing.T) {
	type owner struct {
		agent   string
		weights map[string]int64 // owned items, as the generation weighs them
	}
	even := []owner{
		{"a", map[string]int64{"t/00": 10, "t/01": 10}},
		{"b", map[string]int64{"t/02": 10, "t/03": 10}},
		{"c", map[string]int64{"t/04": 10, "t/05": 10}},
	}
	homed := []owner{
		{"a", map[string]int64{"mirror/a": 1, "p/a/0": 10}},
		{"b", map[string]int64{"p/a/1": 10}},
		{"c", map[string]int64{"p/a/2": 10}},
	}
	for _, tc := range []struct {
		name     string
		gen      []owner
		measured map[string]int64 // by a
		want     bool
	}{
		{"nothing measured", even, nil, false},
		{"measured as the generation weighed", even, map[string]int64{"t/00": 10, "t/01": 10}, false},
		{"one item a little heavier", even, map[string]int64{"t/00": 16, "t/01": 10}, false},
		{"one item much heavier", even, map[string]int64{"t/00": 40, "t/01": 10}, true},
		{"both much lighter", even, map[string]int64{"t/00": 1, "t/01": 1}, true},
		{"a lone heavy item cannot move", []owner{
			{"a", map[string]int64{"t/00": 10}},
			{"b", map[string]int64{"t/01": 10, "t/02": 10}},
			{"c", map[string]int64{"t/03": 10, "t/04": 10}},
		}, map[string]int64{"t/00": 500}, false},
		// The home is a's lightest item, but a home with items does
		// not move, and its heavy partition would not narrow the gap.
		{"a home beside a heavy item cannot move", homed, map[string]int64{"p/a/0": 40}, false},
		{"a home beside a much heavier item: the item moves", homed, map[string]int64{"p/a/0": 10, "mirror/a": 40}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var work []Item
			var members []joined
			prev := map[string]int64{}
			for _, o := range tc.gen {
				var its []Item
				for k, w := range o.weights {
					its = append(its, Item{Key: k, Weight: w})
					it := Item{Key: k}
					if strings.HasPrefix(k, "p/") {
						it.Home = "mirror/a"
					}
					work = append(work, it)
					prev[k] = w
				}
				members = append(members, joined{id: "m-" + o.agent, meta: memberMeta{Agent: o.agent, Process: "p", Owned: its}})
			}
			gen := assign(work, slices.Clone(members), 5)
			if gen["m-a"].Rejoin {
				t.Fatalf("the generation itself moves items: %+v", gen["m-a"])
			}
			m := testMember("a")
			m.cfg.Items = func() []Item { return work }
			m.apply(gen["m-a"], time.Now(), 5)
			for k, w := range tc.measured {
				m.SetWeight(k, w)
			}
			m.mu.Lock()
			got := m.unbalancedLocked(fixedItems(work))
			m.mu.Unlock()
			if got != tc.want {
				t.Errorf("a asks for a rebalance: %v, want %v", got, tc.want)
			}

			// The next join: a tells its measurements, the others what
			// the generation weighed.
			next := slices.Clone(members)
			for i := range next {
				next[i].meta.PreviousWeights, next[i].meta.PreviousGen = gen["m-a"].Weights, 5
				if next[i].meta.Agent != "a" {
					continue
				}
				var its []Item
				for _, k := range slices.Sorted(maps.Keys(m.items)) {
					its = append(its, Item{Key: k, Weight: m.weights[k]})
				}
				next[i].meta.Owned = its
			}
			if moved := assign(work, next, 6)["m-a"].Rejoin; moved != tc.want {
				t.Errorf("the leader moves an item at the next join: %v, want %v (a's measurements %v)", moved, tc.want, tc.measured)
			}
		})
	}
}

// TestBalanceDelay: a asks only once its measurements have called for a
// rebalance for BalanceDelay, never while the generation moves items, and
// not again once the rebalance it asked for has settled.
func TestBalanceDelay(t *testing.T) {
	work := []Item{{Key: "t/00"}, {Key: "t/01"}, {Key: "t/02"}, {Key: "t/03"}}
	members := []joined{
		{id: "m-a", meta: memberMeta{Agent: "a", Owned: owned("t/00", "t/01")}},
		{id: "m-b", meta: memberMeta{Agent: "b", Owned: owned("t/02", "t/03")}},
	}
	gen := assign(work, members, 3)
	m := testMember("a")
	m.apply(gen["m-a"], time.Now(), 3)
	m.SetWeight("t/00", 100)
	m.SetWeight("t/01", 1)
	start := time.Now()
	if m.balanceDue(start) || m.balanceDue(start.Add(m.cfg.BalanceDelay-time.Millisecond)) {
		t.Fatal("asked before BalanceDelay passed")
	}
	if !m.balanceDue(start.Add(m.cfg.BalanceDelay)) {
		t.Fatal("did not ask once BalanceDelay passed")
	}

	moving := gen["m-a"]
	moving.Rejoin = true
	m.apply(moving, time.Now(), 4)
	if m.balanceDue(start) || m.balanceDue(start.Add(time.Hour)) {
		t.Error("asked while the generation moves items")
	}

	// The rebalance a asked for: the leader takes t/01 from a, and the
	// generation after hands it to b.
	members[0].meta.Owned = []Item{{Key: "t/00", Weight: 100}, {Key: "t/01", Weight: 1}}
	for i := range members {
		members[i].meta.PreviousWeights, members[i].meta.PreviousGen = gen["m-a"].Weights, 3
	}
	next := assign(work, members, 5)
	if a := next["m-a"]; !a.Rejoin || !slices.Equal(a.Items, []string{"t/00"}) {
		t.Fatalf("the leader gives a %v (moving: %v), want t/00 alone, t/01 moving", a.Items, a.Rejoin)
	}
	members[0].meta.Owned, members[0].meta.Released = []Item{{Key: "t/00", Weight: 100}}, []string{"t/01"}
	for i := range members {
		members[i].meta.PreviousWeights, members[i].meta.PreviousGen = next["m-a"].Weights, 5
	}
	settled := assign(work, members, 6)
	if b := settled["m-b"]; settled["m-a"].Rejoin || !slices.Contains(b.Items, "t/01") {
		t.Fatalf("b has %v (moving: %v), want t/01 among them", b.Items, settled["m-a"].Rejoin)
	}
	m.apply(settled["m-a"], time.Now(), 6)
	m.SetWeight("t/00", 100)
	if m.balanceDue(start) || m.balanceDue(start.Add(time.Hour)) {
		t.Errorf("asked again once the group balanced by its measurements (a has %v)", settled["m-a"].Items)
	}
}

func testMember(agent string) *Member {
	return newMember(Config{AgentID: agent, Group: "g", SessionTimeout: time.Second, BalanceDelay: 5 * time.Second, Logger: hclog.NewNullLogger()}, "p")
}

// TestJoinStopping: an item lost in a rebalance is named Stopping in the
// member's joins until it is released (then Released), and for a session
// at most (then in neither: the leader hands it on).
func TestJoinStopping(t *testing.T) {
	m := testMember("a")
	me := []MemberLoad{{Agent: "a", Process: "p"}}
	now := time.Now()
	m.apply(assignment{Items: []string{"x", "y", "z"}, Members: me}, now, 1)
	m.apply(assignment{Items: []string{"y"}, Members: me, Rejoin: true}, now, 2)
	m.mu.Lock()
	meta := m.joinMetaLocked(now)
	m.mu.Unlock()
	if !slices.Equal(meta.Stopping, []string{"x", "z"}) || len(meta.Released) != 0 {
		t.Errorf("after losing x and z: stopping %v, released %v; want [x z], none", meta.Stopping, meta.Released)
	}
	m.Released("x")
	m.mu.Lock()
	meta = m.joinMetaLocked(now)
	late := m.joinMetaLocked(now.Add(m.cfg.SessionTimeout + time.Millisecond))
	m.mu.Unlock()
	if !slices.Equal(meta.Stopping, []string{"z"}) || !slices.Equal(meta.Released, []string{"x"}) {
		t.Errorf("x released: stopping %v, released %v; want [z], [x]", meta.Stopping, meta.Released)
	}
	if len(late.Stopping) != 0 {
		t.Errorf("a session after z was lost: stopping %v, want none", late.Stopping)
	}
}
