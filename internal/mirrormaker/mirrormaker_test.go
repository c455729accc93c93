package mirrormaker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
)

func TestProperties(t *testing.T) {
	cfg := Config{SourceAlias: "s1", Source: []string{"a:1", "a:2"}, Target: []string{"b:1"}, Topics: "t1|t2", Tasks: 6,
		Properties: map[string]string{"target.producer.compression.type": "zstd", "tasks.max": "3"}}
	got := string(cfg.properties())
	for _, want := range []string{
		"clusters = s1, target\n",
		"s1.bootstrap.servers = a:1,a:2\n",
		"target.bootstrap.servers = b:1\n",
		"s1->target.enabled = true\n",
		"s1->target.topics = t1|t2\n",
		"target->s1.enabled = false\n",
		"tasks.max = 3\n", // Properties win
		"target.producer.compression.type = zstd\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("mm2.properties lacks %q:\n%s", want, got)
		}
	}
	if r := cfg.RemoteTopic("t1"); r != "s1.t1" {
		t.Errorf("RemoteTopic(t1) = %q, want s1.t1", r)
	}
	if r := (Config{}).RemoteTopic("t1"); r != "source.t1" {
		t.Errorf("RemoteTopic(t1) without an alias = %q, want source.t1", r)
	}
}

func TestStartErrors(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Topics: "t", Dir: t.TempDir()}, "Source and Target are required"},
		{Config{Source: []string{"a"}, Target: []string{"b"}, Dir: t.TempDir()}, "Topics is required"},
		{Config{Source: []string{"a"}, Target: []string{"b"}, Topics: "t"}, "Dir is required"},
		{Config{Source: []string{"a"}, Target: []string{"b"}, Topics: "t", Dir: t.TempDir(), Version: "4.x"}, `version "4.x" is not a release`},
	} {
		if _, err := Start(ctx, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Start(%+v) = %v, want an error containing %q", tc.cfg, err, tc.want)
		}
	}
}

// TestMirrorMaker runs MirrorMaker 2 between two embedded clusters (with
// the strict layer, so that what its producer sends is what Apache Kafka
// would take) and waits for its copy of a topic.
func TestMirrorMaker(t *testing.T) {
	src := devclustertest.Start(t, devcluster.Name("mm2-src"), devcluster.SeedTopics(3, "orders"))
	dst := devclustertest.Start(t, devcluster.Name("mm2-dst"))
	const n = 3000
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // against a hang, not a speed check
	defer cancel()
	pcl, err := kgo.NewClient(kgo.SeedBrokers(src.Bootstrap()...), kgo.DefaultProduceTopic("orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Key: []byte{byte(i)}, Value: []byte("order")}
	}
	if err := pcl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	cfg := Config{Source: src.Bootstrap(), Target: dst.Bootstrap(), Topics: "orders", Tasks: 2, Dir: t.TempDir()}
	p, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(20 * time.Second)
	cl, err := kgo.NewClient(kgo.SeedBrokers(dst.Bootstrap()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for copied := int64(0); copied < n; {
		select {
		case <-ctx.Done():
			t.Fatalf("MirrorMaker copied %d of %d records: %v\n%s", copied, n, ctx.Err(), p.LogTail())
		case <-p.Done():
			t.Fatalf("MirrorMaker exited:\n%s", p.LogTail())
		case <-time.After(200 * time.Millisecond):
		}
		ends, err := adm.ListEndOffsets(ctx, cfg.RemoteTopic("orders"))
		if err != nil {
			continue
		}
		copied = 0
		ends.Each(func(o kadm.ListedOffset) {
			if o.Err == nil {
				copied += o.Offset
			}
		})
	}
}
