package mirrorspec

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"
)

// Source is how a mirror reaches its source cluster (and, in the agent's
// configuration, how the agent reaches the destination). The hcl tags are
// the agent's configuration file's names, the same as the JSON ones.
//
// Secret fields (SASL.Password, SASL.Token, SASL.ClientSecret, TLS.KeyPEM)
// take a literal value, which the agent keeps encrypted in its state topic,
// or a reference resolved by the agent when it connects: ${env:NAME} or
// ${file:PATH:KEY} (KEY of the Java properties file PATH). Responses show a
// literal as Redacted and a reference as written.
type Source struct {
	BootstrapServers []string `json:"bootstrap_servers" hcl:"bootstrap_servers"`
	// SecurityProtocol is PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL;
	// left out, it follows from SASL and TLS being given (Protocol).
	SecurityProtocol string `json:"security_protocol,omitempty" hcl:"security_protocol,optional"`
	SASL             *SASL  `json:"sasl,omitempty" hcl:"sasl,block"`
	TLS              *TLS   `json:"tls,omitempty" hcl:"tls,block"`
}

// SASL is a connection's SASL authentication.
type SASL struct {
	// Mechanism is PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER.
	Mechanism string `json:"mechanism" hcl:"mechanism"`
	Username  string `json:"username,omitempty" hcl:"username,optional"`
	Password  string `json:"password,omitempty" hcl:"password,optional"` // secret
	// Token is a static OAUTHBEARER token (secret).
	Token string `json:"token,omitempty" hcl:"token,optional"`
	// TokenEndpoint, ClientID, ClientSecret (secret) and Scope get
	// OAUTHBEARER tokens with the OAuth 2 client-credentials grant.
	TokenEndpoint string `json:"token_endpoint,omitempty" hcl:"token_endpoint,optional"`
	ClientID      string `json:"client_id,omitempty" hcl:"client_id,optional"`
	ClientSecret  string `json:"client_secret,omitempty" hcl:"client_secret,optional"`
	Scope         string `json:"scope,omitempty" hcl:"scope,optional"`
}

// TLS is a connection's TLS settings. A PEM field and its _file twin are
// alternatives; files are read by the agent when it connects.
type TLS struct {
	CAPEM              string `json:"ca_pem,omitempty" hcl:"ca_pem,optional"`
	CAFile             string `json:"ca_file,omitempty" hcl:"ca_file,optional"`
	CertPEM            string `json:"cert_pem,omitempty" hcl:"cert_pem,optional"`
	CertFile           string `json:"cert_file,omitempty" hcl:"cert_file,optional"`
	KeyPEM             string `json:"key_pem,omitempty" hcl:"key_pem,optional"` // secret
	KeyFile            string `json:"key_file,omitempty" hcl:"key_file,optional"`
	InsecureSkipVerify bool   `json:"insecure_skip_verify,omitempty" hcl:"insecure_skip_verify,optional"`
	// ServerName overrides the name checked in the brokers' certificates.
	ServerName string `json:"server_name,omitempty" hcl:"server_name,optional"`
}

// Redacted stands for a literal secret in every response of the agent.
const Redacted = "(sensitive)"

// The security protocols, as Kafka's security.protocol names them.
const (
	Plaintext     = "PLAINTEXT"
	SSL           = "SSL"
	SASLPlaintext = "SASL_PLAINTEXT"
	SASLSSL       = "SASL_SSL"
)

// SecurityProtocols lists the security protocols.
func SecurityProtocols() []string { return []string{Plaintext, SSL, SASLPlaintext, SASLSSL} }

// The SASL mechanisms.
const (
	MechPlain       = "PLAIN"
	MechScramSHA256 = "SCRAM-SHA-256"
	MechScramSHA512 = "SCRAM-SHA-512"
	MechOAuthBearer = "OAUTHBEARER"
)

// Mechanisms lists the SASL mechanisms.
func Mechanisms() []string {
	return []string{MechPlain, MechScramSHA256, MechScramSHA512, MechOAuthBearer}
}

// Protocol returns c's security protocol: the one given, or the one that
// follows from SASL and TLS being given.
func Protocol(c Source) string {
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

// Secret is one secret field of a connection that is set.
type Secret struct {
	// Field is its JSON path, such as source.sasl.password.
	Field string
	// Value points into the Source it came from.
	Value *string
}

// Secrets returns c's secret fields that are set, by their JSON path under
// prefix ("" for none).
func (c *Source) Secrets(prefix string) []Secret {
	if prefix != "" {
		prefix += "."
	}
	var out []Secret
	add := func(name string, v *string) {
		if *v != "" {
			out = append(out, Secret{prefix + name, v})
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

// Clone returns a copy of c that shares nothing with it.
func (c Source) Clone() Source {
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

var (
	envRef = regexp.MustCompile(`^\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}$`)
	// As Kafka's ConfigTransformer: the path ends at the first colon,
	// the key may hold more.
	fileRef = regexp.MustCompile(`^\$\{file:([^:{}]+):([^{}]+)\}$`)
)

// IsReference says whether v is an ${env:NAME} or ${file:PATH:KEY}
// reference, which the agent resolves when it connects.
func IsReference(v string) bool { return envRef.MatchString(v) || fileRef.MatchString(v) }

// ParseReference splits a reference: ("env", NAME, "") or ("file", PATH,
// KEY); ok is false for anything that is not a reference.
func ParseReference(v string) (kind, name, key string, ok bool) {
	if m := envRef.FindStringSubmatch(v); m != nil {
		return "env", m[1], "", true
	}
	if m := fileRef.FindStringSubmatch(v); m != nil {
		return "file", m[1], m[2], true
	}
	return "", "", "", false
}

// CheckReference says what is wrong with a value that looks like a
// reference ("${...}") but is not a valid one; nil for anything else.
func CheckReference(v string) error {
	if !strings.HasPrefix(v, "${") || IsReference(v) {
		return nil
	}
	return errors.New(`not a valid reference: use ${env:NAME} or ${file:PATH:KEY}`)
}

// ValidateSource says what is wrong with c, one message per fault, each
// naming the field under prefix ("source" or "destination") and the fix.
func ValidateSource(prefix string, c Source) []string {
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
	for _, f := range c.Secrets(prefix) {
		if *f.Value == Redacted {
			errs = append(errs, fmt.Sprintf("%s: %q is how responses hide a secret; send the secret itself or a reference such as ${env:NAME}", f.Field, Redacted))
		} else if err := CheckReference(*f.Value); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", f.Field, err))
		}
	}
	return errs
}

func validateSASL(p string, s *SASL) []string {
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

func validateTLS(p string, t *TLS) []string {
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
