package main

// The lifecycle verbs of mirror topics through the agent's API: pause,
// resume, stop (failover or promote) and recover (KIP-1279's
// kafka-cluster-mirrors.sh --pause, --resume, --stop, --recover). The agent
// answers at once; --wait polls describe until every partition of the
// topics reaches the target state, printing progress.

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kmirror/kmirror/internal/mirrorapi"
)

func init() {
	register("pause", "pause mirror topics (they stay read-only and keep their position)", lifecycleVerb("pause"))
	register("resume", "resume paused mirror topics", lifecycleVerb("resume"))
	register("stop", "stop mirror topics for good: failover (at once) or promote (at lag 0); they become writable", lifecycleVerb("stop"))
	register("recover", "recover failed mirror topics (clear the failure and re-align; --recreate recreates the destination topic)", lifecycleVerb("recover"))
}

// lifecycleTarget is the state --wait waits for after verb.
func lifecycleTarget(verb string) mirrorapi.State {
	switch verb {
	case "pause":
		return mirrorapi.StatePaused
	case "stop":
		return mirrorapi.StateStopped
	}
	return mirrorapi.StateMirroring
}

func lifecycleVerb(verb string) func(ctx context.Context, args []string) error {
	return func(ctx context.Context, args []string) error {
		fs := flag.NewFlagSet("kmirror "+verb, flag.ContinueOnError)
		addr, token := agentFlags(fs)
		mirror := fs.String("mirror", "", "the mirror")
		var topics listFlag
		fs.Var(&topics, "topic", "a mirror topic (repeatable, or comma-separated)")
		var mode *string
		var yes *bool
		if verb == "stop" {
			mode = fs.String("mode", "", "required: failover (stop at once, the source reachable or not) or promote (wait until the destination has everything the source acknowledged)")
			yes = fs.Bool("yes", false, "do not ask for confirmation on a terminal (for scripts; without a terminal nothing is asked)")
		}
		var recreate *bool
		if verb == "recover" {
			recreate = fs.Bool("recreate", false, "for topics with a FAILED partition whose destination cannot be re-aligned: delete and recreate the destination topic (same partitions and configs; its records are lost) and mirror every partition from the source's log start")
		}
		wait := fs.Bool("wait", false, "poll describe until every partition of the topics is "+string(lifecycleTarget(verb))+", showing progress")
		timeout := fs.Duration("timeout", 10*time.Minute, "how long --wait waits")
		if err := parse(fs, args, mirror); err != nil {
			return err
		}
		if len(topics) == 0 {
			return usageError("--topic TOPIC is required (repeatable)")
		}
		cl := newClient(*addr, *token)
		var err error
		switch verb {
		case "pause":
			err = cl.PauseTopics(ctx, *mirror, topics)
		case "resume":
			err = cl.ResumeTopics(ctx, *mirror, topics)
		case "recover":
			err = cl.RecoverTopicsWith(ctx, *mirror, mirrorapi.TopicsRequest{Topics: topics, Recreate: *recreate})
		case "stop":
			switch *mode {
			case mirrorapi.StopModeFailover, mirrorapi.StopModePromote:
			case "":
				return usageError("--mode is required: failover (stop at once, the source reachable or not; what was not mirrored stays behind) or promote (wait until the destination has everything the source acknowledged); a stop cannot be undone")
			default:
				return usageError("--mode %q: use failover or promote", *mode)
			}
			if !*yes && stdinIsTerminal() {
				if err := confirm(fmt.Sprintf("Stop %d topic(s) of mirror %s by %s: [%s]? Mirroring them ends for good and they become writable on the destination. Type yes to go on: ",
					len(topics), *mirror, *mode, strings.Join(topics, " "))); err != nil {
					return err
				}
			}
			err = cl.StopTopics(ctx, *mirror, topics, *mode)
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "Accepted %s of %d topic(s) of mirror %s: [%s]\n", verb, len(topics), *mirror, strings.Join(topics, " "))
		if !*wait {
			return nil
		}
		return waitTopics(ctx, cl, *mirror, topics, lifecycleTarget(verb), *timeout)
	}
}

// stdin and stdinIsTerminal are what confirm reads (variables for the
// tests).
var (
	stdin           io.Reader = os.Stdin
	stdinIsTerminal           = func() bool {
		// A terminal answers the terminal-settings ioctl; /dev/null,
		// a pipe or a file (a CI job) does not.
		_, err := unix.IoctlGetTermios(int(os.Stdin.Fd()), unix.TCGETS)
		return err == nil
	}
)

// confirm asks question on stderr and reads the answer: anything but yes
// (or y) cancels.
func confirm(question string) error {
	fmt.Fprint(os.Stderr, question)
	answer, _ := bufio.NewReader(stdin).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(answer)) {
	case "yes", "y":
		return nil
	}
	return &exitStatus{Code: 1, Err: errors.New("cancelled: nothing was stopped")}
}

// waitTopics polls describe until every partition of topics is in want,
// printing the state counts and the lag when they change; a FAILED
// partition ends the wait with its reason when want is not FAILED.
func waitTopics(ctx context.Context, cl *mirrorapi.Client, mirror string, topics []string, want mirrorapi.State, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		m, err := cl.Mirror(ctx, mirror)
		if err != nil {
			return err
		}
		counts := map[mirrorapi.State]int{}
		var lag int64
		lagUnknown := false
		n, reached := 0, 0
		var failed, waiting []string
		for _, t := range m.Topics {
			if !contains(topics, t.Name) {
				continue
			}
			for _, p := range t.Partitions {
				n++
				counts[p.State]++
				if p.Lag == mirrorapi.LagUnknown {
					lagUnknown = true
				}
				lag += max(p.Lag, 0)
				switch {
				case p.State == want:
					reached++
				case p.State == mirrorapi.StateFailed:
					failed = append(failed, fmt.Sprintf("%s/%d: %s", t.Name, p.Partition, withCode(p.ReasonCode, p.Reason)))
				case p.Reason != "":
					waiting = append(waiting, fmt.Sprintf("%s/%d: %s", t.Name, p.Partition, withCode(p.ReasonCode, p.Reason)))
				}
			}
		}
		lagText := strconv.FormatInt(lag, 10)
		if lagUnknown {
			lagText += " and unknown (the source's end not read)"
		}
		line := fmt.Sprintf("%d/%d partitions %s; states %s; lag %s", reached, n, want, countsText(counts), lagText)
		if line != last {
			fmt.Fprintln(stdout, line)
			last = line
		}
		if n > 0 && reached == n {
			return nil
		}
		if len(failed) > 0 {
			return fmt.Errorf("partitions failed:\n  %s", strings.Join(failed, "\n  "))
		}
		if time.Now().After(deadline) {
			msg := fmt.Sprintf("timed out after %s: %s", timeout, line)
			if len(waiting) > 0 {
				msg += "\n  " + strings.Join(waiting, "\n  ")
			}
			return &exitStatus{Code: 1, Err: fmt.Errorf("%s", msg)}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

func countsText(c map[mirrorapi.State]int) string {
	keys := make([]string, 0, len(c))
	for s, n := range c {
		keys = append(keys, fmt.Sprintf("%s=%d", s, n))
	}
	sort.Strings(keys)
	if len(keys) == 0 {
		return "none"
	}
	return strings.Join(keys, " ")
}
