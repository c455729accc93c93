package main

// The verbs that change mirrors through the agent's API: create, update,
// add and delete (KIP-1279's kafka-cluster-mirrors.sh --create, --start,
// --delete).

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/mirrorspec"
)

func init() {
	register("create", "create a mirror on the agent", runCreate)
	register("update", "change a mirror's source (servers, security), settings (--config) or topics", runUpdate)
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

// regexFlag is a repeatable flag taken whole: a regular expression may
// hold commas.
type regexFlag []string

func (l *regexFlag) String() string { return strings.Join(*l, " ") }

func (l *regexFlag) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// configFlag is the repeatable --config KEY=VALUE flag: KIP-1279 mirror
// config keys, translated by mirrorspec.ApplyConfig.
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
		return fmt.Errorf("%q is not KEY=VALUE (known keys: %s)", v, strings.Join(mirrorspec.ConfigKeys(), ", "))
	}
	c[strings.TrimSpace(k)] = val
	return nil
}

// configUsage documents --config.
var configUsage = "a KIP-1279 mirror config KEY=VALUE (repeatable; lists comma-separated): " + strings.Join(mirrorspec.ConfigKeys(), ", ")

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
	security := sourceSecurityFlags(fs)
	var topics, exclude listFlag
	fs.Var(&topics, "topic", "a source topic to mirror (repeatable, or comma-separated)")
	fs.Var(&exclude, "topic-config-exclude", "a topic config not to sync (repeatable; default: the KIP's list)")
	var regexes regexFlag
	fs.Var(&regexes, "topic-regex", "mirror every source topic whose whole name matches this regular expression (Go RE2), also those created later (repeatable)")
	configs := configFlag{}
	fs.Var(configs, "config", configUsage)
	if err := parse(fs, args, mirror); err != nil {
		return err
	}
	if *bootstrap == "" {
		return usageError("--source-bootstrap HOST:PORT,... is required")
	}
	spec := mirrorapi.MirrorSpec{Name: *mirror, Source: mirrorapi.Source{BootstrapServers: splitList(*bootstrap)}, Topics: topics, TopicConfigExclude: exclude, TopicRegex: regexes}
	if err := security.apply(&spec.Source); err != nil {
		return err
	}
	if err := mirrorspec.ApplyConfig(&spec, configs); err != nil {
		return usageError("--config %v", err)
	}
	if _, err := newClient(*addr, *token).Create(ctx, spec); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Created mirror %s with %d topic(s): [%s]\n", *mirror, len(topics), strings.Join(topics, " "))
	if len(regexes) > 0 {
		fmt.Fprintf(stdout, "Source topics matching %q are added as they appear\n", []string(regexes))
	}
	return nil
}

func runUpdate(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("kmirror update", flag.ContinueOnError)
	addr, token := agentFlags(fs)
	mirror := fs.String("mirror", "", "the mirror to change")
	bootstrap := fs.String("source-bootstrap", "", "new source cluster HOST:PORT,... (the mirror reconnects and resumes from the destination's log ends)")
	security := sourceSecurityFlags(fs)
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
	if security.given() && *bootstrap == "" {
		return usageError("--source-* security settings replace the whole source: give --source-bootstrap too")
	}
	cl := newClient(*addr, *token)
	spec := mirrorapi.MirrorSpec{Source: mirrorapi.Source{BootstrapServers: splitList(*bootstrap)}, TopicConfigExclude: exclude}
	if err := security.apply(&spec.Source); err != nil {
		return err
	}
	if err := mirrorspec.ApplyConfig(&spec, configs); err != nil {
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
	var regexes regexFlag
	fs.Var(&regexes, "topic-regex", "mirror every source topic whose whole name matches this regular expression (Go RE2), also those created later (repeatable)")
	failback := fs.Bool("failback", false, "mirror the topics back into the destination they were mirrored from, resuming after the last mirrored offset kept on the source cluster")
	recreate := fs.Bool("recreate", false, "with --failback: when the destination took records after the last mirrored offset, copy them to a side topic, recreate the topic and mirror it from the source")
	if err := parse(fs, args, mirror); err != nil {
		return err
	}
	if len(topics) == 0 && len(regexes) == 0 {
		return usageError("--topic TOPIC or --topic-regex REGEX is required (repeatable)")
	}
	if *recreate && !*failback {
		return usageError("--recreate applies with --failback (to recreate a FAILED topic's destination: kmirror recover --recreate)")
	}
	req := mirrorapi.AddTopicsRequest{Topics: topics, TopicRegex: regexes, Failback: *failback, Recreate: *recreate}
	m, err := newClient(*addr, *token).AddTopicsWith(ctx, *mirror, req)
	if err != nil {
		return err
	}
	if len(topics) > 0 {
		fmt.Fprintf(stdout, "Added %d topic(s) to mirror %s: [%s]\n", len(topics), *mirror, strings.Join(topics, " "))
	}
	if len(regexes) > 0 {
		fmt.Fprintf(stdout, "Source topics matching %q are added to mirror %s as they appear\n", []string(regexes), *mirror)
	}
	for _, t := range m.Topics {
		fb := t.Failback
		if fb == nil || !contains(topics, t.Name) {
			continue
		}
		for _, p := range fb.Partitions {
			fmt.Fprintf(stdout, "Failback %s/%d: last mirrored offset %d (mirror %s), destination end %d, mirroring from %d\n",
				t.Name, p.Partition, p.LastMirroredOffset, fb.SourceMirror, p.DestinationEnd, p.ResumedAt)
		}
		if fb.DivergentTopic != "" {
			fmt.Fprintf(stdout, "Failback %s: %d record(s) written after the last mirrored offset copied to topic %s; the topic was recreated\n", t.Name, fb.DivergentRecords, fb.DivergentTopic)
		}
	}
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
	err := newClient(*addr, *token).Delete(ctx, *mirror, *force)
	if mirrorapi.IsCode(err, mirrorapi.CodeMirrorHasTopics) {
		return fmt.Errorf("%w\n(add --force to delete it anyway; destination topics and data stay)", err)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Deleted mirror %s\n", *mirror)
	return nil
}

// securityFlags are the flags for a cluster's security protocol, SASL and
// TLS: create's and update's for the source a mirror's agent connects to,
// and verify's for the two clusters it reads itself.
type securityFlags struct {
	prefix                                                        string
	protocol, mechanism, username, password, passwordFile, caCert *string
}

func sourceSecurityFlags(fs *flag.FlagSet) securityFlags {
	return clusterSecurityFlags(fs, "source", "the agent")
}

// clusterSecurityFlags registers --PREFIX-security-protocol, --PREFIX-sasl-*
// and --PREFIX-ca-cert; user says who connects with them ("the agent" or
// this command).
func clusterSecurityFlags(fs *flag.FlagSet, prefix, user string) securityFlags {
	kept := "used by " + user
	if user == "the agent" {
		kept = "sent to the agent, which keeps it encrypted (it needs secret_key_file)"
	}
	return securityFlags{
		prefix:    prefix,
		protocol:  fs.String(prefix+"-security-protocol", "", "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (default: from the SASL and TLS flags given)"),
		mechanism: fs.String(prefix+"-sasl-mechanism", "", "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER"),
		username:  fs.String(prefix+"-sasl-username", "", "SASL user name"),
		password: fs.String(prefix+"-sasl-password", "", "SASL password as a reference "+user+" resolves, such as '${env:NAME}' or '${file:PATH:KEY}' "+
			"(a literal on a command line is seen by other local users: use --"+prefix+"-sasl-password-file for one)"),
		passwordFile: fs.String(prefix+"-sasl-password-file", "", "file holding the SASL password, "+kept),
		caCert:       fs.String(prefix+"-ca-cert", "", "PEM file of the CA that signed the "+prefix+" brokers' certificates; turns TLS on"),
	}
}

func (f securityFlags) given() bool {
	return *f.protocol != "" || *f.mechanism != "" || *f.username != "" || *f.password != "" || *f.passwordFile != "" || *f.caCert != ""
}

// apply sets src's security settings from the flags; the agent checks
// them and names the field at fault.
func (f securityFlags) apply(src *mirrorapi.Source) error {
	src.SecurityProtocol = *f.protocol
	if *f.password != "" && *f.passwordFile != "" {
		return usageError("--%[1]s-sasl-password and --%[1]s-sasl-password-file: give one", f.prefix)
	}
	if *f.mechanism != "" || *f.username != "" || *f.password != "" || *f.passwordFile != "" {
		src.SASL = &mirrorapi.SourceSASL{Mechanism: *f.mechanism, Username: *f.username, Password: *f.password}
		if *f.passwordFile != "" {
			b, err := os.ReadFile(*f.passwordFile)
			if err != nil {
				return fmt.Errorf("--%s-sasl-password-file: %w", f.prefix, err)
			}
			src.SASL.Password = strings.TrimRight(string(b), "\r\n")
		}
	}
	if *f.caCert != "" {
		b, err := os.ReadFile(*f.caCert)
		if err != nil {
			return fmt.Errorf("--%s-ca-cert: %w", f.prefix, err)
		}
		src.TLS = &mirrorapi.SourceTLS{CAPEM: string(b)}
	}
	return nil
}
