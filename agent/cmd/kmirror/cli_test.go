package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/api"
	"github.com/kmirror/kmirror/agent/coordinator"
	"github.com/kmirror/kmirror/agent/coordinator/coordinatortest"
	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/reason"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files of the CLI tests")

// goldenNow is the instant the golden files are rendered at.
var goldenNow = time.Date(2026, 11, 30, 12, 0, 5, 0, time.UTC)

// fixtureBackend serves a fixed describe through the real API handler.
type fixtureBackend struct{ api.Backend }

func (fixtureBackend) Running() bool { return true }

func (fixtureBackend) Describe() []coordinator.MirrorStatus {
	p := func(topic string, n int32, src, dst int64, st mirrorapi.State, code mirrorapi.ReasonCode, why string) mirrorapi.Partition {
		return mirrorapi.Partition{Mirror: "dr", Topic: topic, Partition: n, State: st, Reason: why, ReasonCode: code,
			SourceOffset: src, SourceLastStable: src, SourceOffsetAt: goldenNow.Add(-time.Second), DestinationOffset: dst, Lag: src - dst, LastMirrored: dst - 1,
			LagMillis: 1500 * (src - dst), Bytes: 100 * dst, Records: dst}
	}
	// A failed partition's source end read two minutes ago (a source
	// that stopped answering), one not read at all.
	stale := p("bar", 0, 12, 7, mirrorapi.StateFailed, reason.DestinationTopicRecreated, "destination topic \"bar\" was recreated")
	stale.SourceOffsetAt = goldenNow.Add(-2 * time.Minute)
	unread := p("bar", 1, 0, 3, mirrorapi.StatePaused, "", "")
	unread.SourceOffsetAt, unread.Lag, unread.LagMillis = time.Time{}, mirrorapi.LagUnknown, 0
	return []coordinator.MirrorStatus{
		{Name: "dr", Source: mirrorapi.Source{BootstrapServers: []string{"src-1:9092", "src-2:9092"},
			SASL: &mirrorapi.SourceSASL{Mechanism: "SCRAM-SHA-512", Username: "mirror-dr", Password: mirrorapi.Redacted}}, MaxLag: 10,
			TopicRegex: []string{"audit-.*", "a{1,3}"},
			Throttle: &mirrorapi.Throttle{RateBytesPerSecond: 1 << 20, Partitions: []string{"foo:1"},
				SourceQuota: true, SourceQuotaEntity: "user=mirror-dr,client-id=kmirror-dr"},
			Fetch:       mirrorapi.FetchStats{Requests: 120, Bytes: 27300, ThrottledMillis: 1500},
			StateCounts: map[mirrorapi.State]int{mirrorapi.StateMirroring: 2, mirrorapi.StateFailed: 1, mirrorapi.StatePaused: 1},
			Topics: []mirrorapi.Topic{
				{Name: "foo", Partitions: []mirrorapi.Partition{
					withAgent(p("foo", 0, 189, 189, mirrorapi.StateMirroring, "", ""), "a1"),
					withAgent(p("foo", 1, 94, 84, mirrorapi.StateMirroring, "", ""), "a2"),
				}},
				{Name: "bar", Partitions: []mirrorapi.Partition{stale, unread}},
				{Name: "baz", Error: "source topic \"baz\" does not exist", ErrorCode: reason.SourceTopicMissing, Partitions: []mirrorapi.Partition{}},
			},
			Sync: mirrorapi.MetadataSync{
				mirrorapi.SyncConfigs:    {LastSuccess: "2026-11-30T12:00:00Z", Items: 2, Drift: []string{`topic foo: retention.ms was "1000" on the destination, set back to "86400000"`}},
				mirrorapi.SyncPartitions: {LastSuccess: "2026-11-30T12:00:00Z", Items: 3, Errors: 1, LastError: `topic "baz": source topic "baz" does not exist`},
				mirrorapi.SyncGroups:     {LastSuccess: "2026-11-30T12:00:01Z", Items: 4},
				mirrorapi.SyncACLs:       {Errors: 7, LastError: "the destination has no authorizer"},
			},
			SourceClusterID: "src-cluster", Agent: "a1", TopicConfigExclude: []string{"follower.replication.throttled.replicas"},
			GroupsInclude: []string{"app-.*"}, GroupsExclude: []string{"app-test"}, ACLInclude: []string{"TOPIC;foo.*"},
			MetadataRefreshIntervalMs: 30000, TxnTimeoutMs: 3600000, TxnTimeoutFrom: "destination transaction.max.timeout.ms=3600000 (lowest, on broker(s) [0 1 2])"},
		{Name: "mig", Source: mirrorapi.Source{BootstrapServers: []string{"old:9092"}}, Error: "connecting to source old:9092: dial tcp: lookup old: no such host",
			StateCounts: map[mirrorapi.State]int{}, Topics: []mirrorapi.Topic{},
			GroupsInclude: []string{".*"}, GroupsExclude: []string{}, ACLInclude: []string{}, MetadataRefreshIntervalMs: 10000},
	}
}

// withAgent is p run by agent (coordination = "group").
func withAgent(p mirrorapi.Partition, agent string) mirrorapi.Partition {
	p.Agent = agent
	return p
}

// capture runs a command with stdout captured.
func capture(t *testing.T, run func(context.Context, []string) error, args ...string) (string, error) {
	t.Helper()
	var b bytes.Buffer
	old := stdout
	stdout = &b
	defer func() { stdout = old }()
	err := run(context.Background(), args)
	return b.String(), err
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *updateGolden {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (go test -update rewrites it):\ngot:\n%s\nwant:\n%s", name, got, want)
	}
}

// TestGolden renders describe, list and offsets of a fixed agent answer,
// through the real API handler and client, as tables and as JSON.
func TestGolden(t *testing.T) {
	defer func(c func() time.Time) { clock = c }(clock)
	clock = func() time.Time { return goldenNow }
	srv := httptest.NewServer(api.Handler(fixtureBackend{}, api.Options{Tokens: []string{"tok"}}))
	defer srv.Close()
	t.Setenv("KMIRROR_ADDR", srv.URL)
	t.Setenv("KMIRROR_TOKEN", "tok")
	for _, c := range []struct {
		file string
		run  func(context.Context, []string) error
		args []string
	}{
		{"describe.txt", runDescribe, nil},
		{"describe.json", runDescribe, []string{"--output", "json"}},
		{"describe-mirror.txt", runDescribe, []string{"--mirror", "dr"}},
		{"list.txt", runList, nil},
		{"list.json", runList, []string{"--output", "json"}},
		{"offsets.txt", runOffsets, []string{"--mirror", "dr"}},
		{"offsets.json", runOffsets, []string{"--mirror", "dr", "--topic", "foo", "--output", "json"}},
	} {
		t.Run(c.file, func(t *testing.T) {
			out, err := capture(t, c.run, c.args...)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, c.file, out)
		})
	}
	// A wrong token is an error naming the code.
	_, err := capture(t, runList, "--token", "bad")
	if !mirrorapi.IsCode(err, mirrorapi.CodeUnauthorized) {
		t.Errorf("list with a bad token: %v", err)
	}
}

// TestVerbs runs create, add, update, list, offsets and delete against a
// real coordinator and two dev clusters, and the bad command lines.
func TestVerbs(t *testing.T) {
	src := devclustertest.Start(t, devcluster.Name("src"), devcluster.KfakeOptions(kfake.SeedTopics(1, "orders", "events")))
	dst := devclustertest.Start(t, devcluster.Name("dst"))
	co := coordinatortest.Start(t, coordinator.Config{Destination: []kgo.Opt{kgo.SeedBrokers(dst.Bootstrap()...)}, RefreshInterval: 200 * time.Millisecond}).Coordinator
	srv := httptest.NewServer(api.Handler(co, api.Options{}))
	defer srv.Close()
	t.Setenv("KMIRROR_ADDR", srv.URL)

	run := func(want string, f func(context.Context, []string) error, args ...string) string {
		t.Helper()
		out, err := capture(t, f, args...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if !strings.Contains(out, want) {
			t.Fatalf("%v printed %q, want %q", args, out, want)
		}
		return out
	}
	run("Created mirror dr with 1 topic(s): [orders]\n", runCreate, "--mirror", "dr", "--source-bootstrap", src.BootstrapString(), "--topic", "orders")
	run("Added 1 topic(s) to mirror dr: [events]\n", runAdd, "--mirror", "dr", "--topic", "events")
	run(`Source topics matching ["aud.*t,x"] are added to mirror dr as they appear`, runAdd, "--mirror", "dr", "--topic-regex", "aud.*t,x")
	if ms := co.Mirrors(); len(ms) != 1 || len(ms[0].TopicRegex) != 1 || ms[0].TopicRegex[0] != "aud.*t,x" {
		t.Fatalf("--topic-regex, taken whole: %+v", ms)
	}
	if _, err := capture(t, runAdd, "--mirror", "dr", "--topic-regex", "(("); !mirrorapi.IsCode(err, mirrorapi.CodeInvalidConfig) || !strings.Contains(err.Error(), "topic_regex") {
		t.Errorf("add an invalid --topic-regex: %v", err)
	}
	if _, err := capture(t, runAdd, "--mirror", "dr", "--topic", "audit", "--failback"); !mirrorapi.IsCode(err, mirrorapi.CodeFailbackRefused) {
		t.Errorf("--failback from a source without a stopped mirror: %v", err)
	}
	run("Updated mirror dr\n", runUpdate, "--mirror", "dr", "--source-bootstrap", src.BootstrapString())
	run("Updated mirror dr\n", runUpdate, "--mirror", "dr", "--config", "mirror.groups.include=app-.*,billing", "--config", "mirror.metadata.refresh.interval.ms=500", "--config", "mirror.acl.include=")
	if ms := co.Mirrors(); len(ms) != 1 || !slices.Equal(ms[0].GroupsInclude, []string{"app-.*", "billing"}) || ms[0].MetadataRefreshIntervalMs != 500 ||
		ms[0].ACLInclude == nil || len(ms[0].ACLInclude) != 0 || len(ms[0].Topics) != 2 {
		t.Errorf("update --config: the mirror's spec is %+v", ms)
	}
	var st *exitStatus
	if _, err := capture(t, runCreate, "--mirror", "x", "--source-bootstrap", "h:1", "--config", "mirror.acl.include"); !errors.As(err, &st) || st.Code != 2 {
		t.Errorf("--config without '=': %v, want exit status 2", err)
	}
	if _, err := capture(t, runUpdate, "--mirror", "dr", "--config", "mirror.acl.include=TABLE;x"); !mirrorapi.IsCode(err, mirrorapi.CodeInvalidConfig) || !strings.Contains(err.Error(), "acl_include") {
		t.Errorf("update with a bad ACL rule: %v", err)
	}
	run("dr      "+src.BootstrapString()+"  2", runList)
	run(`"topics": [
        "orders",
        "events"
      ]`, runList, "--output", "json")
	// The topics mirror (empty here, so nothing is mirrored yet: -1).
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, _ := capture(t, runOffsets, "--mirror", "dr")
		if strings.Contains(out, "dr      events  0          -1") && strings.Contains(out, "dr      orders  0          -1") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("offsets: %s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	run(`"last_mirrored_offset": -1`, runOffsets, "--mirror", "dr", "--output", "json")
	run("MIRROR  TOPIC   PARTITION  SOURCE-OFFSET  DESTINATION-OFFSET  LAG  STATE", runDescribe)

	// Refusals: errors name the code and change nothing.
	if _, err := capture(t, runDelete, "--mirror", "dr"); !mirrorapi.IsCode(err, mirrorapi.CodeMirrorHasTopics) || !strings.Contains(err.Error(), "--force") {
		t.Errorf("delete without --force: %v", err)
	}
	if _, err := capture(t, runCreate, "--mirror", "dr", "--source-bootstrap", src.BootstrapString()); !mirrorapi.IsCode(err, mirrorapi.CodeMirrorAlreadyExists) {
		t.Errorf("create twice: %v", err)
	}
	if _, err := capture(t, runAdd, "--mirror", "nope", "--topic", "x"); !mirrorapi.IsCode(err, mirrorapi.CodeMirrorNotFound) {
		t.Errorf("add to an unknown mirror: %v", err)
	}
	for _, args := range [][]string{
		{"create", "--source-bootstrap", "h:1"},
		{"create", "--mirror", "x"},
		{"add", "--mirror", "dr"},
		{"add", "--mirror", "dr", "--topic", "audit", "--recreate"},
		{"update", "--mirror", "dr"},
		{"update", "--mirror", "dr", "--config", "mirror.groups.inlcude=.*"},
		{"delete"},
		{"list", "--output", "yaml"},
		{"offsets", "--mirror", "dr", "extra"},
	} {
		_, err := capture(t, commands[args[0]].run, args[1:]...)
		var st *exitStatus
		if !errors.As(err, &st) || st.Code != 2 || st.Err == nil {
			t.Errorf("%v: %v, want a usage error (exit status 2)", args, err)
		}
	}
	run("Deleted mirror dr\n", runDelete, "--mirror", "dr", "--force")
	run("MIRROR  SOURCE  TOPICS  PARTITIONS  MAX-LAG  STATES\n", runList)
	if ms := co.Mirrors(); len(ms) != 0 {
		t.Errorf("mirrors after delete: %+v", ms)
	}
}

// TestDescribeUnknownMirror: the error names the API's code, as every
// other error from the agent does.
func TestDescribeUnknownMirror(t *testing.T) {
	srv := httptest.NewServer(api.Handler(fixtureBackend{}, api.Options{Tokens: []string{"tok"}}))
	defer srv.Close()
	t.Setenv("KMIRROR_ADDR", srv.URL)
	t.Setenv("KMIRROR_TOKEN", "tok")
	_, err := capture(t, runDescribe, "--mirror", "nosuch")
	if err == nil || !strings.Contains(err.Error(), `--mirror "nosuch": MIRROR_NOT_FOUND`) {
		t.Fatalf("describe --mirror nosuch: %v, want MIRROR_NOT_FOUND", err)
	}
}
