package devcluster

import (
	"crypto/tls"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/internal/certs"
)

// TLS listeners. devcluster serves TLS on every broker itself, in the
// listener it gives kfake (under compatConn, which must read the requests and
// answers in the clear); with SASL users too, connections are SASL_SSL.
// kfake has no OAUTHBEARER.

// TLS makes every broker listen with TLS only, with a certificate for
// localhost and 127.0.0.1 signed by a CA made for this cluster (CACertPEM).
func TLS() Option { return option(func(c *config) { c.tls = true }) }

// TLSCertificate makes every broker listen with TLS only, presenting cert
// (for a certificate of your own, such as dev-cluster --tls-cert); clients
// then trust its issuer themselves, and CACertPEM is empty.
func TLSCertificate(cert tls.Certificate) Option {
	return option(func(c *config) { c.tls, c.tlsCert = true, &cert })
}

// tlsOptions returns the brokers' server TLS config, and the client config
// the helpers connect with; nil without TLS.
func (c *config) tlsOptions() (server, client *tls.Config, caPEM []byte, err error) {
	if !c.tls {
		return nil, nil, nil, nil
	}
	if c.tlsCert != nil {
		// The helpers connect to 127.0.0.1 and cannot know the issuer
		// of a certificate given to them; they only need to reach
		// their own cluster.
		return &tls.Config{Certificates: []tls.Certificate{*c.tlsCert}, MinVersion: tls.VersionTLS12},
			&tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}, nil, nil //nolint:gosec // own cluster on loopback
	}
	ca, err := certs.NewCA("kmirror dev-cluster " + c.name)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("devcluster: %w", err)
	}
	pair, err := ca.Server()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("devcluster: %w", err)
	}
	cert, err := pair.TLS()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("devcluster: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		&tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}, ca.CertPEM(), nil
}

// CACertPEM returns the PEM certificate of the CA that signed the brokers'
// certificate of a cluster started with TLS; nil otherwise.
func (c *Cluster) CACertPEM() []byte { return append([]byte(nil), c.caPEM...) }

// ClientTLS returns a client TLS config that trusts the cluster's CA; nil
// for a cluster without TLS.
func (c *Cluster) ClientTLS() *tls.Config {
	if c.clientTLS == nil {
		return nil
	}
	return c.clientTLS.Clone()
}

// tlsOpt is the helpers' TLS dial option; nil without TLS.
func (c *Cluster) tlsOpt() []kgo.Opt {
	if c.clientTLS == nil {
		return nil
	}
	return []kgo.Opt{kgo.DialTLSConfig(c.clientTLS.Clone())}
}
