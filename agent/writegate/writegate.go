// Package writegate carries, in a context, the checks a write to the
// destination must pass right before it is sent: an agent that shares a
// destination with others may write a mirror only while it owns it
// (agent/membership's Member.Check), and every write made on behalf of that
// mirror carries the check in its context, down to the request that leaves
// the writer's connections.
package writegate

import "context"

type key struct{}

// Gate is the checks of a context as one. Every write made under one
// context shares its *Gate, so a request of many writes can ask each
// distinct gate once (Gates are comparable).
type Gate struct{ check func() error }

// Check returns nil when a write may be sent now; a nil Gate always does.
func (g *Gate) Check() error {
	if g == nil {
		return nil
	}
	return g.check()
}

// With returns ctx with check added to the checks of ctx: Check(ctx) then
// fails when any of them does.
func With(ctx context.Context, check func() error) context.Context {
	if check == nil {
		return ctx
	}
	if prev := From(ctx); prev != nil {
		inner := check
		check = func() error {
			if err := prev.Check(); err != nil {
				return err
			}
			return inner()
		}
	}
	return context.WithValue(ctx, key{}, &Gate{check})
}

// From returns the checks of ctx, nil when it has none.
func From(ctx context.Context) *Gate {
	g, _ := ctx.Value(key{}).(*Gate)
	return g
}

// Check runs the checks of ctx: nil when a write may be sent now.
func Check(ctx context.Context) error { return From(ctx).Check() }
