package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/kmirror/kmirror/internal/devcluster"
	"github.com/kmirror/kmirror/internal/devcluster/devclustertest"
)

// TestVerifySecured: verify reaches clusters that take only TLS and SASL,
// with the same flags create takes for a source (a password as an
// ${env:} reference or in a file), and fails on a wrong password.
func TestVerifySecured(t *testing.T) {
	const user, pass = "verifier", "s3cret-verify"
	var clusters [2]*devcluster.Cluster
	dir := t.TempDir()
	for i, name := range []string{"src", "dst"} {
		c := devclustertest.Start(t, devcluster.Name(name), devcluster.TLS(), devcluster.SASLUser(user, pass),
			devcluster.KfakeOptions(kfake.SeedTopics(2, "secured")))
		clusters[i] = c
		if err := os.WriteFile(filepath.Join(dir, name+"-ca.pem"), c.CACertPEM(), 0o600); err != nil {
			t.Fatal(err)
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.Bootstrap()...), kgo.DialTLSConfig(c.ClientTLS()),
			kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		for i := range 20 {
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "secured", Partition: int32(i % 2), Value: fmt.Appendf(nil, "v%d", i), Timestamp: time.UnixMilli(1_700_000_000_000 + int64(i))}).FirstErr(); err != nil {
				t.Fatalf("producing to %s: %v", name, err)
			}
		}
		cancel()
		cl.Close()
	}
	if err := os.WriteFile(filepath.Join(dir, "dst-password"), []byte(pass+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KMIRROR_TEST_VERIFY_PASSWORD", pass)
	args := func(dstPassword ...string) []string {
		a := []string{"--topic", "secured",
			"--source-bootstrap", strings.Join(clusters[0].Bootstrap(), ","), "--source-ca-cert", filepath.Join(dir, "src-ca.pem"),
			"--source-sasl-mechanism", "SCRAM-SHA-512", "--source-sasl-username", user, "--source-sasl-password", "${env:KMIRROR_TEST_VERIFY_PASSWORD}",
			"--destination-bootstrap", strings.Join(clusters[1].Bootstrap(), ","), "--destination-ca-cert", filepath.Join(dir, "dst-ca.pem"),
			"--destination-sasl-mechanism", "SCRAM-SHA-512", "--destination-sasl-username", user}
		return append(a, dstPassword...)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := verifyCommand(ctx, args("--destination-sasl-password-file", filepath.Join(dir, "dst-password")), &out, io.Discard); err != nil {
		t.Fatalf("verify over TLS and SASL: %v\n%s", err, out.String())
	}
	if !strings.HasPrefix(out.String(), "topic secured: OK") {
		t.Errorf("verify over TLS and SASL did not report OK:\n%s", out.String())
	}

	wctx, wcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer wcancel()
	if err := verifyCommand(wctx, args("--destination-sasl-password", "wrong"), io.Discard, io.Discard); err == nil {
		t.Error("verify with a wrong destination password succeeded")
	}
	if err := verifyCommand(ctx, args("--destination-sasl-password", "x", "--destination-sasl-password-file", "f"), io.Discard, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "--destination-sasl-password and --destination-sasl-password-file: give one") {
		t.Errorf("two passwords: %v", err)
	}
}
