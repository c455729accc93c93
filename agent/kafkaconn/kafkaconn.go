// Package kafkaconn turns a cluster connection description (bootstrap
// servers, security protocol, SASL, TLS; a mirrorapi.Source) into franz-go
// client options. It is the one place that does so, for the destination in
// the agent's configuration and for every mirror's source.
//
// It also keeps a connection's secrets out of sight: Seal encrypts literal
// secrets before the state topic keeps a mirror's spec, Redact replaces them
// in what the API shows, and Options resolves references and sealed values
// only when a client is built. Errors name the field, never a secret.
package kafkaconn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/kmirror/kmirror/agent/secrets"
	"github.com/kmirror/kmirror/internal/mirrorapi"
	"github.com/kmirror/kmirror/internal/mirrorspec"
)

// The security protocols and SASL mechanisms (mirrorspec's, under the
// names this package has always given them).
const (
	Plaintext       = mirrorspec.Plaintext
	SSL             = mirrorspec.SSL
	SASLPlaintext   = mirrorspec.SASLPlaintext
	SASLSSL         = mirrorspec.SASLSSL
	MechPlain       = mirrorspec.MechPlain
	MechScramSHA256 = mirrorspec.MechScramSHA256
	MechScramSHA512 = mirrorspec.MechScramSHA512
	MechOAuthBearer = mirrorspec.MechOAuthBearer
)

// Seal returns c with its literal secrets sealed by box, for the state
// topic; references and values sealed already stay as they are (a sealed
// value must open with box). Without a box, a literal secret is refused
// with a message saying how to configure a key or use a reference.
func Seal(prefix string, c mirrorapi.Source, box *secrets.Box) (mirrorapi.Source, error) {
	c = c.Clone()
	for _, f := range c.Secrets(prefix) {
		v := *f.Value
		switch {
		case secrets.IsReference(v):
		case secrets.IsSealed(v):
			if box == nil {
				return c, fmt.Errorf("%s: a sealed value, but the agent has no secret key; start it with secret_key_file", f.Field)
			}
			if _, err := box.Open(v); err != nil {
				return c, fmt.Errorf("%s: %w", f.Field, err)
			}
		case box == nil:
			return c, fmt.Errorf("%s: the agent keeps literal secrets encrypted and has no key to do so: start it with secret_key_file "+
				"(--secret-key-file or KMIRROR_SECRET_KEY_FILE; make one with `openssl rand -hex 32`), "+
				"or give a reference the agent resolves when it connects, ${env:NAME} or ${file:PATH:KEY}", f.Field)
		default:
			s, err := box.Seal(v)
			if err != nil {
				return c, fmt.Errorf("%s: %w", f.Field, err)
			}
			*f.Value = s
		}
	}
	return c, nil
}

// Redact returns c as responses show it: literal and sealed secrets
// replaced by mirrorapi.Redacted, references as written.
func Redact(c mirrorapi.Source) mirrorapi.Source {
	c = c.Clone()
	for _, f := range c.Secrets("") {
		if !secrets.IsReference(*f.Value) {
			*f.Value = mirrorapi.Redacted
		}
	}
	return c
}

// Options returns the franz-go options that connect to c: seed brokers,
// TLS and SASL. Secrets are resolved now (references read, sealed values
// opened with box, which may be nil when none is sealed), and files read.
func Options(prefix string, c mirrorapi.Source, box *secrets.Box) ([]kgo.Opt, error) {
	if errs := mirrorspec.ValidateSource(prefix, c); len(errs) > 0 {
		return nil, errors.New(strings.Join(errs, "; "))
	}
	resolve := func(field, v string) (string, error) {
		s, err := secrets.Resolve(v, box)
		if err != nil {
			return "", fmt.Errorf("%s.%s: %w", prefix, field, err)
		}
		return s, nil
	}
	opts := []kgo.Opt{kgo.SeedBrokers(c.BootstrapServers...)}
	proto := mirrorspec.Protocol(c)
	if proto == SSL || proto == SASLSSL {
		cfg, err := tlsConfig(prefix+".tls", c.TLS, resolve)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	if proto == SASLPlaintext || proto == SASLSSL {
		m, err := mechanism(c.SASL, resolve)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

func tlsConfig(p string, t *mirrorapi.SourceTLS, resolve func(field, v string) (string, error)) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if t == nil {
		return cfg, nil // the system's roots
	}
	cfg.InsecureSkipVerify = t.InsecureSkipVerify //nolint:gosec // the user asked for it, for tests
	cfg.ServerName = t.ServerName
	ca := []byte(t.CAPEM)
	if t.CAFile != "" {
		b, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%s.ca_file: %w", p, err)
		}
		ca = b
	}
	if len(ca) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			return nil, fmt.Errorf("%s.ca_file %s: no PEM certificate in it", p, t.CAFile)
		}
		cfg.RootCAs = pool
	}
	cert := []byte(t.CertPEM)
	if t.CertFile != "" {
		b, err := os.ReadFile(t.CertFile)
		if err != nil {
			return nil, fmt.Errorf("%s.cert_file: %w", p, err)
		}
		cert = b
	}
	var key []byte
	if t.KeyFile != "" {
		b, err := os.ReadFile(t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%s.key_file: %w", p, err)
		}
		key = b
	} else if t.KeyPEM != "" {
		s, err := resolve("tls.key_pem", t.KeyPEM)
		if err != nil {
			return nil, err
		}
		key = []byte(s)
	}
	if len(cert) > 0 {
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			// X509KeyPair's errors describe the PEM blocks, not their
			// bytes, so the key stays out of the message.
			return nil, fmt.Errorf("%s: the client certificate and private key do not form a pair: %w", p, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

func mechanism(s *mirrorapi.SourceSASL, resolve func(field, v string) (string, error)) (sasl.Mechanism, error) {
	switch s.Mechanism {
	case MechPlain, MechScramSHA256, MechScramSHA512:
		pass, err := resolve("sasl.password", s.Password)
		if err != nil {
			return nil, err
		}
		switch s.Mechanism {
		case MechPlain:
			return plain.Auth{User: s.Username, Pass: pass}.AsMechanism(), nil
		case MechScramSHA256:
			return scram.Auth{User: s.Username, Pass: pass}.AsSha256Mechanism(), nil
		default:
			return scram.Auth{User: s.Username, Pass: pass}.AsSha512Mechanism(), nil
		}
	case MechOAuthBearer:
		if s.Token != "" {
			tok, err := resolve("sasl.token", s.Token)
			if err != nil {
				return nil, err
			}
			return oauth.Auth{Token: tok}.AsMechanism(), nil
		}
		secret, err := resolve("sasl.client_secret", s.ClientSecret)
		if err != nil {
			return nil, err
		}
		src := &tokenSource{endpoint: s.TokenEndpoint, clientID: s.ClientID, secret: secret, scope: s.Scope}
		return oauth.Oauth(src.auth), nil
	}
	return nil, fmt.Errorf("sasl.mechanism %q: use PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER", s.Mechanism)
}
