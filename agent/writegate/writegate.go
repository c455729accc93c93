// Package writegate carries, in a context, the checks a write to the
// destination must pass right before it is sent: an agent that shares a
// destination with others may write a mirror only while it owns it
// (agent/membership's Member.Check), and every write made on behalf of that
// mirror carries the check in its context, down to the request that leaves
// the writer's connections.
package writegate

import "context"

type key struct{}

// With returns ctx with check added to the checks of ctx: Check(ctx) then
// fails when any of them does.
func With(ctx context.Context, check func() error) context.Context {
	if check == nil {
		return ctx
	}
	if prev := From(ctx); prev != nil {
		inner := check
		check = func() error {
			if err := prev(); err != nil {
				return err
			}
			return inner()
		}
	}
	return context.WithValue(ctx, key{}, check)
}

// From returns the checks of ctx as one function, nil when it has none.
func From(ctx context.Context) func() error {
	f, _ := ctx.Value(key{}).(func() error)
	return f
}

// Check runs the checks of ctx: nil when a write may be sent now.
func Check(ctx context.Context) error {
	if f := From(ctx); f != nil {
		return f()
	}
	return nil
}
