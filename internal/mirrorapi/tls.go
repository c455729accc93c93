package mirrorapi

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// ClientTLS is how a client checks an https agent's certificate and, when
// the agent asks for one, proves who it is.
type ClientTLS struct {
	// CAPEM holds the CA certificate(s) the agent's certificate must
	// chain to, instead of the system's roots.
	CAPEM []byte
	// CertPEM and KeyPEM are a client certificate and its key, for an
	// agent started with client_ca_file.
	CertPEM, KeyPEM []byte
	// InsecureSkipVerify skips verifying the agent's certificate (tests).
	InsecureSkipVerify bool
}

// Errors of SetTLS, for callers to name their own setting.
var (
	ErrNoCACert   = errors.New("no PEM certificate in the CA certificate (expected -----BEGIN CERTIFICATE-----)")
	ErrClientCert = errors.New("the client certificate and key")
)

// SetTLS makes the client use t to call an https agent.
func (c *Client) SetTLS(t ClientTLS) error {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: t.InsecureSkipVerify} //nolint:gosec // the caller asked for it
	if len(t.CAPEM) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(t.CAPEM) {
			return ErrNoCACert
		}
		cfg.RootCAs = pool
	}
	if len(t.CertPEM) > 0 || len(t.KeyPEM) > 0 {
		pair, err := tls.X509KeyPair(t.CertPEM, t.KeyPEM)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrClientCert, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg
	timeout := 30 * time.Second
	if c.HTTP != nil && c.HTTP.Timeout > 0 {
		timeout = c.HTTP.Timeout
	}
	c.HTTP = &http.Client{Timeout: timeout, Transport: tr}
	return nil
}
