package writegate

import (
	"context"
	"errors"
	"testing"
)

func TestCheck(t *testing.T) {
	outer, inner := errors.New("outer"), errors.New("inner")
	var outerErr, innerErr error
	ctx := With(context.Background(), func() error { return outerErr })
	ctx = With(ctx, func() error { return innerErr })
	ctx = With(ctx, nil) // adds nothing
	cases := []struct {
		outer, inner, want error
	}{
		{nil, nil, nil},
		{outer, nil, outer},
		{nil, inner, inner},
		{outer, inner, outer},
	}
	for _, c := range cases {
		outerErr, innerErr = c.outer, c.inner
		if got := Check(ctx); !errors.Is(got, c.want) || (c.want == nil && got != nil) {
			t.Errorf("outer %v, inner %v: Check = %v, want %v", c.outer, c.inner, got, c.want)
		}
	}
	if err := Check(context.Background()); err != nil {
		t.Errorf("Check without checks = %v", err)
	}
	if From(context.Background()) != nil {
		t.Error("From without checks is not nil")
	}
	// Values survive the cancellation-free contexts a drain uses.
	outerErr = outer
	if got := Check(context.WithoutCancel(ctx)); !errors.Is(got, outer) {
		t.Errorf("Check(WithoutCancel) = %v, want %v", got, outer)
	}
}
