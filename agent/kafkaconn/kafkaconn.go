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
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/kmirror/kmirror/agent/secrets"
	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// The security protocols, as Kafka's security.protocol names them.
const (
	Plaintext     = "PLAINTEXT"
	SSL           = "SSL"
	SASLPlaintext = "SASL_PLAINTEXT"
	SASLSSL       = "SASL_SSL"
)

// The SASL mechanisms.
const (
	MechPlain       = "PLAIN"
	MechScramSHA256 = "SCRAM-SHA-256"
	MechScramSHA512 = "SCRAM-SHA-512"
	MechOAuthBearer = "OAUTHBEARER"
)

// Protocol returns c's security protocol: the one given, or the one that
// follows from SASL and TLS being given.
func Protocol(c mirrorapi.Source) string {
	if c.SecurityProtocol != "" {
		return c.SecurityProtocol
	}
	switch {
	case c.SASL != nil && c.TLS != nil:
		return SASLSSL
	case c.SASL != nil:
		return SASLPlaintext
	case c.TLS != nil:
		return SSL
	}
	return Plaintext
}

// secretField is one secret field of a connection.
type secretField struct {
	name string
	v    *string
}

// secretFields returns c's secret fields that are set, by their JSON path
// under prefix.
func secretFields(prefix string, c *mirrorapi.Source) []secretField {
	var out []secretField
	add := func(name string, v *string) {
		if *v != "" {
			out = append(out, secretField{prefix + "." + name, v})
		}
	}
	if c.SASL != nil {
		add("sasl.password", &c.SASL.Password)
		add("sasl.token", &c.SASL.Token)
		add("sasl.client_secret", &c.SASL.ClientSecret)
	}
	if c.TLS != nil {
		add("tls.key_pem", &c.TLS.KeyPEM)
	}
	return out
}

// clone returns a copy of c that shares nothing with it.
func clone(c mirrorapi.Source) mirrorapi.Source {
	c.BootstrapServers = append([]string(nil), c.BootstrapServers...)
	if c.SASL != nil {
		s := *c.SASL
		c.SASL = &s
	}
	if c.TLS != nil {
		t := *c.TLS
		c.TLS = &t
	}
	return c
}

// Validate says what is wrong with c, one message per fault, each naming
// the field under prefix ("source" or "destination") and the fix.
func Validate(prefix string, c mirrorapi.Source) []string {
	var errs []string
	bad := func(field, format string, args ...any) {
		errs = append(errs, prefix+"."+field+": "+fmt.Sprintf(format, args...))
	}
	proto := Protocol(c)
	switch proto {
	case Plaintext, SSL, SASLPlaintext, SASLSSL:
	default:
		bad("security_protocol", "%q: use PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL", c.SecurityProtocol)
		return errs
	}
	withSASL := proto == SASLPlaintext || proto == SASLSSL
	withTLS := proto == SSL || proto == SASLSSL
	switch {
	case withSASL && c.SASL == nil:
		bad("sasl", "security_protocol %s needs a sasl block with mechanism and credentials", proto)
	case !withSASL && c.SASL != nil:
		bad("sasl", "security_protocol %s does not authenticate with SASL: use SASL_PLAINTEXT or SASL_SSL, or remove sasl", proto)
	}
	if !withTLS && c.TLS != nil {
		bad("tls", "security_protocol %s does not use TLS: use SSL or SASL_SSL, or remove tls", proto)
	}
	if s := c.SASL; s != nil {
		errs = append(errs, validateSASL(prefix+".sasl", s)...)
	}
	if t := c.TLS; t != nil {
		errs = append(errs, validateTLS(prefix+".tls", t)...)
	}
	for _, f := range secretFields(prefix, &c) {
		if *f.v == mirrorapi.Redacted {
			errs = append(errs, fmt.Sprintf("%s: %q is how responses hide a secret; send the secret itself or a reference such as ${env:NAME}", f.name, mirrorapi.Redacted))
		} else if err := secrets.CheckReference(*f.v); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", f.name, err))
		}
	}
	return errs
}

func validateSASL(p string, s *mirrorapi.SourceSASL) []string {
	var errs []string
	bad := func(field, format string, args ...any) {
		errs = append(errs, p+"."+field+": "+fmt.Sprintf(format, args...))
	}
	unused := func(mech string, fields map[string]string) {
		for _, name := range []string{"username", "password", "token", "token_endpoint", "client_id", "client_secret", "scope"} {
			if v, ok := fields[name]; ok && v != "" {
				bad(name, "mechanism %s does not use it; remove it", mech)
			}
		}
	}
	switch s.Mechanism {
	case MechPlain, MechScramSHA256, MechScramSHA512:
		if s.Username == "" {
			bad("username", "mechanism %s needs a username", s.Mechanism)
		}
		if s.Password == "" {
			bad("password", "mechanism %s needs a password (or a reference such as ${env:NAME})", s.Mechanism)
		}
		unused(s.Mechanism, map[string]string{"token": s.Token, "token_endpoint": s.TokenEndpoint, "client_id": s.ClientID, "client_secret": s.ClientSecret, "scope": s.Scope})
	case MechOAuthBearer:
		unused(s.Mechanism, map[string]string{"username": s.Username, "password": s.Password})
		oidc := s.TokenEndpoint != "" || s.ClientID != "" || s.ClientSecret != "" || s.Scope != ""
		switch {
		case s.Token != "" && oidc:
			bad("token", "give either a static token or token_endpoint with client_id and client_secret, not both")
		case s.Token == "" && !oidc:
			bad("token", "mechanism OAUTHBEARER needs a token, or token_endpoint with client_id and client_secret")
		case oidc:
			if s.ClientID == "" {
				bad("client_id", "token_endpoint needs a client_id")
			}
			if s.ClientSecret == "" {
				bad("client_secret", "token_endpoint needs a client_secret (or a reference such as ${env:NAME})")
			}
			if err := checkTokenEndpoint(s.TokenEndpoint); err != nil {
				bad("token_endpoint", "%v", err)
			}
		}
	case "":
		bad("mechanism", "missing; use PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER")
	default:
		bad("mechanism", "%q: use PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER", s.Mechanism)
	}
	return errs
}

// checkTokenEndpoint accepts https URLs, and http to a loopback host (a
// local token proxy).
func checkTokenEndpoint(s string) error {
	u, err := url.Parse(s)
	if s == "" || err != nil || u.Host == "" {
		return fmt.Errorf("%q is not an https:// URL", s)
	}
	if u.Scheme == "https" {
		return nil
	}
	if ip := net.ParseIP(u.Hostname()); u.Scheme == "http" && (u.Hostname() == "localhost" || (ip != nil && ip.IsLoopback())) {
		return nil
	}
	return fmt.Errorf("%q: use https:// (the client secret must not cross the network in clear text)", s)
}

func validateTLS(p string, t *mirrorapi.SourceTLS) []string {
	var errs []string
	bad := func(field, format string, args ...any) {
		errs = append(errs, p+"."+field+": "+fmt.Sprintf(format, args...))
	}
	if t.CAPEM != "" && t.CAFile != "" {
		bad("ca_pem", "give ca_pem or ca_file, not both")
	}
	if t.CertPEM != "" && t.CertFile != "" {
		bad("cert_pem", "give cert_pem or cert_file, not both")
	}
	if t.KeyPEM != "" && t.KeyFile != "" {
		bad("key_pem", "give key_pem or key_file, not both")
	}
	hasCert, hasKey := t.CertPEM != "" || t.CertFile != "", t.KeyPEM != "" || t.KeyFile != ""
	switch {
	case hasCert && !hasKey:
		bad("key_pem", "a client certificate needs its private key: give key_pem or key_file")
	case hasKey && !hasCert:
		bad("cert_pem", "a private key needs its client certificate: give cert_pem or cert_file")
	}
	if t.CAPEM != "" && !x509.NewCertPool().AppendCertsFromPEM([]byte(t.CAPEM)) {
		bad("ca_pem", "no PEM certificate in it (expected -----BEGIN CERTIFICATE-----)")
	}
	if t.CertPEM != "" && !x509.NewCertPool().AppendCertsFromPEM([]byte(t.CertPEM)) {
		bad("cert_pem", "no PEM certificate in it (expected -----BEGIN CERTIFICATE-----)")
	}
	return errs
}

// Seal returns c with its literal secrets sealed by box, for the state
// topic; references and values sealed already stay as they are (a sealed
// value must open with box). Without a box, a literal secret is refused
// with a message saying how to configure a key or use a reference.
func Seal(prefix string, c mirrorapi.Source, box *secrets.Box) (mirrorapi.Source, error) {
	c = clone(c)
	for _, f := range secretFields(prefix, &c) {
		v := *f.v
		switch {
		case secrets.IsReference(v):
		case secrets.IsSealed(v):
			if box == nil {
				return c, fmt.Errorf("%s: a sealed value, but the agent has no secret key; start it with secret_key_file", f.name)
			}
			if _, err := box.Open(v); err != nil {
				return c, fmt.Errorf("%s: %w", f.name, err)
			}
		case box == nil:
			return c, fmt.Errorf("%s: the agent keeps literal secrets encrypted and has no key to do so: start it with secret_key_file "+
				"(--secret-key-file or KMIRROR_SECRET_KEY_FILE; make one with `openssl rand -hex 32`), "+
				"or give a reference the agent resolves when it connects, ${env:NAME} or ${file:PATH:KEY}", f.name)
		default:
			s, err := box.Seal(v)
			if err != nil {
				return c, fmt.Errorf("%s: %w", f.name, err)
			}
			*f.v = s
		}
	}
	return c, nil
}

// Redact returns c as responses show it: literal and sealed secrets
// replaced by mirrorapi.Redacted, references as written.
func Redact(c mirrorapi.Source) mirrorapi.Source {
	c = clone(c)
	for _, f := range secretFields("", &c) {
		if !secrets.IsReference(*f.v) {
			*f.v = mirrorapi.Redacted
		}
	}
	return c
}

// Options returns the franz-go options that connect to c: seed brokers,
// TLS and SASL. Secrets are resolved now (references read, sealed values
// opened with box, which may be nil when none is sealed), and files read.
func Options(prefix string, c mirrorapi.Source, box *secrets.Box) ([]kgo.Opt, error) {
	if errs := Validate(prefix, c); len(errs) > 0 {
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
	proto := Protocol(c)
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
