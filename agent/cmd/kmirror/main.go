// Command kmirror is the one binary for the mirroring agent (`kmirror agent`),
// the operator CLI and the developer tools (`kmirror dev-cluster`).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// command is one subcommand: run receives the arguments after its name.
type command struct {
	summary string
	run     func(ctx context.Context, args []string) error
}

// commands is filled by the init functions of the files that implement them.
var commands = map[string]command{}

func register(name, summary string, run func(ctx context.Context, args []string) error) {
	commands[name] = command{summary: summary, run: run}
}

// exitStatus is an error that sets the exit status: main prints Err, if
// any, like any other error, and exits with Code. A nil Err exits quietly,
// for a command that has already said why (verify's report, a flag error
// the flag package printed).
type exitStatus struct {
	Code int
	Err  error
}

func (e *exitStatus) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *exitStatus) Unwrap() error { return e.Err }

func usage() {
	fmt.Fprintln(os.Stderr, "usage: kmirror COMMAND [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-12s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(os.Stderr, "\nRun `kmirror COMMAND -h` for the flags of one command.")
}

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		usage()
		os.Exit(2)
	}
	cmd, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "kmirror: unknown command %q\n\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := cmd.run(ctx, os.Args[2:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		var st *exitStatus
		if errors.As(err, &st) {
			if st.Err != nil {
				fmt.Fprintf(os.Stderr, "kmirror %s: %v\n", os.Args[1], st.Err)
			}
			os.Exit(st.Code)
		}
		fmt.Fprintf(os.Stderr, "kmirror %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}
