package main

// The verbs that change mirrors through the agent's API: create, update,
// add and delete (KIP-1279's kafka-cluster-mirrors.sh --create, --start,
// --delete).

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/kmirror/kmirror/internal/mirrorapi"
)

func init() {
	register("create", "create a mirror on the agent", runCreate)
	register("update", "change a mirror's source bootstrap servers or add topics", runUpdate)
	register("add", "add topics to a mirror", runAdd)
	register("delete", "delete a mirror (destination topics and data stay)", runDelete)
}

// listFlag is a repeatable flag that also takes comma-separated values.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

// configFlag is the repeatable --config KEY=VALUE flag: KIP-1279 mirror
// config keys, translated by mirrorapi.ApplyConfig.
type configFlag map[string]string

func (c configFlag) String() string {
	var kv []string
	for k, v := range c {
		kv = append(kv, k+"="+v)
	}
	slices.Sort(kv)
	return strings.Join(kv, " ")
}

func (c configFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || strings.TrimSpace(k) == "" {
		return fmt.Errorf("%q is not KEY=VALUE (known keys: %s)", v, strings.Join(mirrorapi.ConfigKeys(), ", "))
	}
	c[strings.TrimSpace(k)] = val
	return nil
}

// configUsage documents --config.
var configUsage = "a KIP-1279 mirror config KEY=VALUE (repeatable; lists comma-separated): " + strings.Join(mirrorapi.ConfigKeys(), ", ")

// splitList splits a comma-separated flag value, nil when it is empty.
func splitList(v string) []string {
	var l listFlag
	_ = l.Set(v)
	return l
}

// parse parses args and checks that no positional arguments are left and
// that --mirror is set; a bad command line exits with status 2.
func parse(fs *flag.FlagSet, args []string, mirror *string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &exitStatus{Code: 2} // the flag package already printed the error and the usage
	}
	if fs.NArg() > 0 {
		return usageError("unexpected argument %q; every value goes with a flag (see -h)", fs.Arg(0))
	}
	if mirror != nil && *mirror == "" {
		return usageError("--mirror NAME is required")
	}
	return nil
}

func runCreate(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("kmirror create", flag.ContinueOnError)
	addr, token := agentFlags(fs)
	mirror := fs.String("mirror", "", "the new mirror's name")
	bootstrap := fs.String("source-bootstrap", "", "source cluster HOST:PORT,...")
	var topics, exclude listFlag
	fs.Var(&topics, "topic", "a source topic to mirror (repeatable, or comma-separated)")
	fs.Var(&exclude, "topic-config-exclude", "a topic config not to sync (repeatable; default: the KIP's list)")
	configs := configFlag{}
	fs.Var(configs, "config", configUsage)
	if err := parse(fs, args, mirror); err != nil {
		return err
	}
	if *bootstrap == "" {
		return usageError("--source-bootstrap HOST:PORT,... is required")
	}
	spec := mirrorapi.MirrorSpec{Name: *mirror, Source: mirrorapi.Source{BootstrapServers: splitList(*bootstrap)}, Topics: topics, TopicConfigExclude: exclude}
	if err := mirrorapi.ApplyConfig(&spec, configs); err != nil {
		return usageError("--config %v", err)
	}
	if _, err := mirrorapi.NewClient(*addr, *token).Create(ctx, spec); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Created mirror %s with %d topic(s): [%s]\n", *mirror, len(topics), strings.Join(topics, " "))
	return nil
}

func runUpdate(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("kmirror update", flag.ContinueOnError)
	addr, token := agentFlags(fs)
	mirror := fs.String("mirror", "", "the mirror to change")
	bootstrap := fs.String("source-bootstrap", "", "new source cluster HOST:PORT,... (the mirror reconnects and resumes from the destination's log ends)")
	var topics, exclude listFlag
	fs.Var(&topics, "topic", "a topic to add (repeatable, or comma-separated)")
	fs.Var(&exclude, "topic-config-exclude", "replace the topic configs not synced (repeatable)")
	configs := configFlag{}
	fs.Var(configs, "config", configUsage+"; replaces that setting, takes effect at once")
	if err := parse(fs, args, mirror); err != nil {
		return err
	}
	if *bootstrap == "" && len(topics) == 0 && len(exclude) == 0 && len(configs) == 0 {
		return usageError("nothing to change: give --source-bootstrap, --topic, --topic-config-exclude or --config")
	}
	cl := mirrorapi.NewClient(*addr, *token)
	spec := mirrorapi.MirrorSpec{Source: mirrorapi.Source{BootstrapServers: splitList(*bootstrap)}, TopicConfigExclude: exclude}
	if err := mirrorapi.ApplyConfig(&spec, configs); err != nil {
		return usageError("--config %v", err)
	}
	if len(topics) > 0 {
		// PUT takes the whole topic list: the current one plus the new.
		cur, err := cl.Mirror(ctx, *mirror)
		if err != nil {
			return err
		}
		for _, t := range cur.Topics {
			spec.Topics = append(spec.Topics, t.Name)
		}
		spec.Topics = append(spec.Topics, topics...)
	}
	if _, err := cl.Update(ctx, *mirror, spec); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Updated mirror %s\n", *mirror)
	return nil
}

func runAdd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("kmirror add", flag.ContinueOnError)
	addr, token := agentFlags(fs)
	mirror := fs.String("mirror", "", "the mirror to add topics to")
	var topics listFlag
	fs.Var(&topics, "topic", "a source topic to mirror (repeatable, or comma-separated)")
	if err := parse(fs, args, mirror); err != nil {
		return err
	}
	if len(topics) == 0 {
		return usageError("--topic TOPIC is required (repeatable)")
	}
	if _, err := mirrorapi.NewClient(*addr, *token).AddTopics(ctx, *mirror, topics); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Added %d topic(s) to mirror %s: [%s]\n", len(topics), *mirror, strings.Join(topics, " "))
	return nil
}

func runDelete(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("kmirror delete", flag.ContinueOnError)
	addr, token := agentFlags(fs)
	mirror := fs.String("mirror", "", "the mirror to delete")
	force := fs.Bool("force", false, "delete a mirror that still has topics (its destination topics and data stay)")
	if err := parse(fs, args, mirror); err != nil {
		return err
	}
	err := mirrorapi.NewClient(*addr, *token).Delete(ctx, *mirror, *force)
	if mirrorapi.IsCode(err, mirrorapi.CodeMirrorHasTopics) {
		return fmt.Errorf("%w\n(add --force to delete it anyway; destination topics and data stay)", err)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Deleted mirror %s\n", *mirror)
	return nil
}
