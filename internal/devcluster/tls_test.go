package devcluster

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/internal/certs"
)

// TestTLS: a TLS cluster answers clients that trust its CA, with and
// without SASL (SASL_SSL), and refuses plaintext and untrusting clients;
// the strict layer's helpers keep working through TLS.
func TestTLS(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []Option
		auth []kgo.Opt
	}{
		{"ssl", []Option{TLS()}, nil},
		{"sasl_ssl", []Option{TLS(), SASLUser("alice", "alice-secret")}, []kgo.Opt{as512("alice", "alice-secret")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startT(t, append(tc.opts, KfakeOptions(kfake.SeedTopics(1, "t")))...)
			if len(c.CACertPEM()) == 0 || c.ClientTLS() == nil {
				t.Fatal("a TLS cluster has no CA")
			}
			cl := newClient(t, c, append([]kgo.Opt{kgo.DialTLSConfig(c.ClientTLS())}, tc.auth...)...)
			if err := produceOne(t, cl, "t"); err != nil {
				t.Fatalf("producing over TLS: %v", err)
			}
			// The strict layer's helpers reach the cluster through TLS too.
			op, err := c.opClient()
			if err != nil {
				t.Fatal(err)
			}
			defer op.Close()
			if err := op.Ping(testCtx(t)); err != nil {
				t.Fatalf("helper over TLS: %v", err)
			}
			for name, opts := range map[string][]kgo.Opt{
				"plaintext":  tc.auth,
				"unknown CA": append([]kgo.Opt{kgo.DialTLSConfig(&tls.Config{MinVersion: tls.VersionTLS12})}, tc.auth...),
			} {
				bad := newClient(t, c, append(opts, kgo.RequestRetries(0), kgo.RetryTimeout(time.Second))...)
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				err := bad.Ping(ctx)
				cancel()
				if err == nil {
					t.Errorf("%s client: connected to a TLS cluster", name)
				}
			}
		})
	}
}

// TestTLSCertificate: a cluster given a certificate of its own presents it.
func TestTLSCertificate(t *testing.T) {
	ca, err := certs.NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := ca.Server()
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pair.TLS()
	if err != nil {
		t.Fatal(err)
	}
	c := startT(t, TLSCertificate(cert))
	if len(c.CACertPEM()) != 0 {
		t.Error("a cluster with a given certificate reports a CA of its own")
	}
	cl := newClient(t, c, kgo.DialTLSConfig(&tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}))
	if err := cl.Ping(testCtx(t)); err != nil {
		t.Fatalf("client trusting the given certificate's CA: %v", err)
	}
}
