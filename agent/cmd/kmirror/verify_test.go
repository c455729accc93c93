package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/api"
	"github.com/kmirror/kmirror/agent/coordinator"
	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
	"github.com/kmirror/kmirror/internal/kmirrorbin"
	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// verifyFixture is two dev clusters holding topic "same" (two partitions,
// identical on both) and topic "differ" (one partition whose record at
// offset 3 has another value on the destination).
type verifyFixture struct {
	src, dst *devcluster.Cluster
}

// verifyTimestamp is the create time of every fixture record, fixed so that
// reports are byte for byte the same on every run.
var verifyTimestamp = time.UnixMilli(1700000000000)

func newVerifyFixture(t *testing.T) verifyFixture {
	t.Helper()
	f := verifyFixture{
		src: devclustertest.Start(t, devcluster.Name("verify-src")),
		dst: devclustertest.Start(t, devcluster.Name("verify-dst")),
	}
	for _, c := range []*devcluster.Cluster{f.src, f.dst} {
		if err := c.Kfake().CreateTopic("same", 2, nil); err != nil {
			t.Fatal(err)
		}
		if err := c.Kfake().CreateTopic("differ", 1, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Records are built afresh for each cluster: kgo keeps state in a
	// record it produced.
	records := func(value3 string) []*kgo.Record {
		var rs []*kgo.Record
		for i := range 6 {
			rs = append(rs, &kgo.Record{Topic: "same", Partition: int32(i % 2),
				Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i), Timestamp: verifyTimestamp,
				Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("x")}}})
		}
		for i := range 5 {
			v := fmt.Sprintf("v%d", i)
			if i == 3 {
				v = value3
			}
			rs = append(rs, &kgo.Record{Topic: "differ", Key: fmt.Appendf(nil, "k%d", i), Value: []byte(v), Timestamp: verifyTimestamp})
		}
		return rs
	}
	produce(t, f.src, records("v3"))
	produce(t, f.dst, records("changed"))
	return f
}

// produce writes the records one at a time, so that each lands at the next
// offset of its partition.
func produce(t *testing.T, c *devcluster.Cluster, rs []*kgo.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Bootstrap()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, r := range rs {
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce to %s: %v", c.Name(), err)
		}
	}
}

func (f verifyFixture) args(topic string, extra ...string) []string {
	return append([]string{"--source-bootstrap", f.src.BootstrapString(), "--destination-bootstrap", f.dst.BootstrapString(),
		"--topic", topic}, extra...)
}

// TestVerifyBinary runs the real binary: identity exits 0 with the
// summary, a differing record exits 1 naming its offset with nothing on
// stderr, and bad flags exit 2 naming the flag.
func TestVerifyBinary(t *testing.T) {
	bin := kmirrorbin.Path(t)
	f := newVerifyFixture(t)

	run := func(t *testing.T, args ...string) (code int, stdout, stderr string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append([]string{"verify"}, args...)...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		var exit *exec.ExitError
		switch {
		case errors.As(err, &exit):
			code = exit.ExitCode()
		case err != nil:
			t.Fatal(err)
		}
		return code, out.String(), errOut.String()
	}

	t.Run("identical", func(t *testing.T) {
		code, out, errOut := run(t, f.args("same")...)
		if code != 0 {
			t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
		if !strings.HasPrefix(out, "topic same: OK, 4 partition comparisons, no mismatches\n") {
			t.Errorf("stdout does not start with the OK summary:\n%s", out)
		}
		if errOut != "" {
			t.Errorf("stderr not empty:\n%s", errOut)
		}
	})

	t.Run("differing record", func(t *testing.T) {
		code, out, errOut := run(t, f.args("differ")...)
		if code != 1 {
			t.Fatalf("exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
		for _, want := range []string{
			"topic differ: 2 mismatches",
			"partition 0 offset 3 (read_uncommitted): value",
			"partition 0 offset 3 (read_committed): value",
			`source:      value "v3"`,
			`destination: value "changed"`,
		} {
			if !strings.Contains(out, want) {
				t.Errorf("stdout does not contain %q:\n%s", want, out)
			}
		}
		if errOut != "" {
			t.Errorf("a mismatch must exit 1 without an error line; stderr:\n%s", errOut)
		}
	})

	t.Run("json", func(t *testing.T) {
		code, out, errOut := run(t, f.args("differ", "--output", "json", "--isolation", "read_committed")...)
		if code != 1 {
			t.Fatalf("exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
		var rep verifyJSON
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("stdout is not JSON: %v\n%s", err, out)
		}
		if rep.OK || rep.TotalMismatches != 1 || len(rep.Mismatches) != 1 || len(rep.Partitions) != 1 {
			t.Fatalf("report %+v: want one partition comparison and one mismatch", rep)
		}
		m := rep.Mismatches[0]
		if m.Partition != 0 || m.Offset != 3 || m.Kind != "value" || m.Isolation != "read_committed" {
			t.Errorf("mismatch %+v: want value at partition 0 offset 3 (read_committed)", m)
		}
		if p := rep.Partitions[0]; p.Compared != 5 || p.Source.HighWatermark != 5 || p.Destination.LastStable != 5 {
			t.Errorf("partition %+v: want 5 compared, high watermark 5, last stable 5", p)
		}
	})

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no topic", f.args("", "--from", "1"), "--topic is required"},
		{"bad isolation", f.args("same", "--isolation", "serializable"), `--isolation "serializable"`},
		{"bad partition", f.args("same", "--partition", "0,x"), "-partition"},
		{"unknown flag", f.args("same", "--colour"), "-colour"},
		{"no source", []string{"--destination-bootstrap", f.dst.BootstrapString(), "--topic", "same"}, "--source-bootstrap is required"},
	} {
		t.Run("bad flags/"+tc.name, func(t *testing.T) {
			code, out, errOut := run(t, tc.args...)
			if code != 2 {
				t.Fatalf("exit %d, want 2\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
			}
			if !strings.Contains(errOut, tc.want) {
				t.Errorf("stderr does not name the flag (%q):\n%s", tc.want, errOut)
			}
			if out != "" {
				t.Errorf("stdout not empty:\n%s", out)
			}
		})
	}
}

// TestVerifyTextShape pins the text report: the verdict line, the
// per-partition table and each mismatch with its offset and both sides.
func TestVerifyTextShape(t *testing.T) {
	f := newVerifyFixture(t)
	var out, errOut bytes.Buffer
	err := verifyCommand(context.Background(), f.args("differ", "--max-mismatches", "1"), &out, &errOut)
	var st *exitStatus
	if !errors.As(err, &st) || st.Code != 1 || st.Err != nil {
		t.Fatalf("error %v, want a quiet exit status 1", err)
	}
	const want = `topic differ: 2 mismatches (first 1 shown below)
ISOLATION         PARTITION  RANGE   COMPARED  VISIBLE SRC/DST  LOG START SRC/DST  END SRC/DST  MISMATCHES
read_uncommitted  0          [0, 5)  5         5/5              0/0                5/5          1
read_committed    0          [0, 5)  5         5/5              0/0                5/5          1
partition 0 offset 3 (read_uncommitted): value: the records differ
    source:      value "v3"
    destination: value "changed"
`
	if got := out.String(); got != want {
		t.Errorf("text report:\n%s\nwant:\n%s", got, want)
	}
	if errOut.Len() != 0 {
		t.Errorf("stderr: %s", errOut.String())
	}

	out.Reset()
	if err := verifyCommand(context.Background(), f.args("same", "--partition", "1", "--from", "1", "--to", "3"), &out, &errOut); err != nil {
		t.Fatal(err)
	}
	const wantOK = `topic same: OK, 2 partition comparisons, no mismatches
ISOLATION         PARTITION  RANGE   COMPARED  VISIBLE SRC/DST  LOG START SRC/DST  END SRC/DST  MISMATCHES
read_uncommitted  1          [1, 3)  2         2/2              0/0                3/3          0
read_committed    1          [1, 3)  2         2/2              0/0                3/3          0
`
	if got := out.String(); got != wantOK {
		t.Errorf("text report:\n%s\nwant:\n%s", got, wantOK)
	}
}

// TestVerifyFlagErrors checks, without clusters, that each bad value is
// refused with exit status 2 and an error naming the flag.
func TestVerifyFlagErrors(t *testing.T) {
	base := []string{"--source-bootstrap", "127.0.0.1:1", "--destination-bootstrap", "127.0.0.1:2", "--topic", "t"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--destination-bootstrap", "127.0.0.1:2", "--topic", "t"}, "--source-bootstrap is required"},
		{[]string{"--source-bootstrap", "127.0.0.1:1", "--topic", "t"}, "--destination-bootstrap is required"},
		{append(base, "--source-bootstrap", "nohost"), `--source-bootstrap "nohost"`},
		{append(base, "--destination-bootstrap", "h:1,h:99999"), `--destination-bootstrap "h:1,h:99999"`},
		{base[:4], "--topic is required"},
		{append(base, "--from", "-1"), "--from -1"},
		{append(base, "--to", "-5"), "--to -5"},
		{append(base, "--from", "7", "--to", "7"), "--to 7 must be above --from 7"},
		{append(base, "--max-mismatches", "-2"), "--max-mismatches -2"},
		{append(base, "--output", "yaml"), `--output "yaml"`},
		{append(base, "--isolation", "none"), `--isolation "none"`},
		{append(base, "extra"), `unexpected argument "extra"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stderr bytes.Buffer
			err := verifyCommand(context.Background(), tc.args, &bytes.Buffer{}, &stderr)
			var st *exitStatus
			if !errors.As(err, &st) || st.Code != 2 {
				t.Fatalf("error %v, want exit status 2", err)
			}
			if st.Err == nil || !strings.Contains(st.Err.Error(), tc.want) {
				t.Errorf("error %v does not contain %q", st.Err, tc.want)
			}
		})
	}

	// Errors the flag package reports itself: printed on stderr with the
	// usage, then a quiet exit status 2.
	var stderr bytes.Buffer
	err := verifyCommand(context.Background(), append(base, "--partition", "-3"), &bytes.Buffer{}, &stderr)
	var st *exitStatus
	if !errors.As(err, &st) || st.Code != 2 || st.Err != nil {
		t.Fatalf("--partition -3: error %v, want a quiet exit status 2", err)
	}
	if !strings.Contains(stderr.String(), `invalid value "-3" for flag -partition`) {
		t.Errorf("stderr does not name --partition:\n%s", stderr.String())
	}
	if err := verifyCommand(context.Background(), []string{"-h"}, &bytes.Buffer{}, &bytes.Buffer{}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp", err)
	}
}

func TestPartitionList(t *testing.T) {
	var p partitionList
	for _, v := range []string{"3", "1,2", " 2 , 0"} {
		if err := p.Set(v); err != nil {
			t.Fatalf("Set(%q): %v", v, err)
		}
	}
	if got := p.String(); got != "3,1,2,0" {
		t.Errorf("String() = %q, want 3,1,2,0 (duplicates dropped)", got)
	}
}

// lmoBackend answers describe with one mirror "dr" whose topic "differ"
// has partition 0 in state with last mirrored offset lmo.
type lmoBackend struct {
	api.Backend
	state mirrorapi.State
	lmo   int64
}

func (lmoBackend) Running() bool { return true }

func (b lmoBackend) Describe() []coordinator.MirrorStatus {
	return []coordinator.MirrorStatus{{Name: "dr", Topics: []mirrorapi.Topic{{Name: "differ", Partitions: []mirrorapi.Partition{
		{Mirror: "dr", Topic: "differ", Partition: 0, State: b.state, LastMirrored: b.lmo},
	}}}}}
}

// TestVerifyToLastMirrored: the fixture's "differ" differs at offset 3, as
// a destination written after a failover at last mirrored offset 2 does.
// --to-last-mirrored compares offsets 0-2 only and passes; a partition not
// stopped, a topic the mirror lacks and --to with it are refused (exit 2).
func TestVerifyToLastMirrored(t *testing.T) {
	f := newVerifyFixture(t)
	run := func(b lmoBackend, extra ...string) (string, error) {
		srv := httptest.NewServer(api.Handler(b, api.Options{}))
		defer srv.Close()
		var out, errOut bytes.Buffer
		err := verifyCommand(context.Background(), f.args("differ", append([]string{"--agent", srv.URL}, extra...)...), &out, &errOut)
		return out.String(), err
	}
	out, err := run(lmoBackend{state: mirrorapi.StateStopped, lmo: 2}, "--to-last-mirrored", "dr")
	if err != nil {
		t.Fatalf("verify --to-last-mirrored: %v\n%s", err, out)
	}
	if !strings.Contains(out, "read_committed    0          [0, 3)  3") {
		t.Errorf("want offsets [0, 3) compared:\n%s", out)
	}
	// Without the bound the records written after offset 2 differ.
	if _, err := run(lmoBackend{state: mirrorapi.StateStopped, lmo: 2}); err == nil {
		t.Error("verify without --to-last-mirrored passed; the fixture differs at offset 3")
	}
	for _, tc := range []struct {
		b    lmoBackend
		args []string
		want string
	}{
		{lmoBackend{state: mirrorapi.StateMirroring, lmo: 2}, []string{"--to-last-mirrored", "dr"}, "partition 0 of differ is MIRRORING"},
		{lmoBackend{state: mirrorapi.StateStopped, lmo: 2}, []string{"--to-last-mirrored", "dr", "--to", "2"}, "give one"},
		{lmoBackend{state: mirrorapi.StateStopped, lmo: 2}, []string{"--to-last-mirrored", "dr", "--partition", "1"}, "mirror dr has no partition 1"},
		{lmoBackend{state: mirrorapi.StateStopped, lmo: 2}, []string{"--to-last-mirrored", "nope"}, "MIRROR_NOT_FOUND"},
	} {
		_, err := run(tc.b, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one saying %q", tc.args, err, tc.want)
		}
	}
}
