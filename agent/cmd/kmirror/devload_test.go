package main

import (
	"context"
	"strings"
	"testing"
)

// TestDevLoadFlagErrors checks that each bad combination is refused before
// anything connects, with an error naming the flag.
func TestDevLoadFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--topic", "t"}, "--bootstrap and --topic are required"},
		{[]string{"--bootstrap", "127.0.0.1:1"}, "--bootstrap and --topic are required"},
		{[]string{"--bootstrap", "127.0.0.1:1", "--topic", "t", "--partitions", "0"}, "--partitions 0: use at least 1"},
		{[]string{"--bootstrap", "127.0.0.1:1", "--topic", "t", "--abort-every", "3"}, "--abort-every 3: give a positive number together with --transactional-id"},
		{[]string{"--bootstrap", "127.0.0.1:1", "--topic", "t", "--transactional-id", "x", "--abort-every", "-1"}, "--abort-every -1"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // a run that got past validation would stop at once
			err := runDevLoad(ctx, tc.args)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
