package api

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// ServerTLS returns the TLS configuration of the API listener: the
// certificate and key in certFile and keyFile and, when clientCAFile is
// given, client certificates signed by that CA verified when presented
// (Options.RequireClientCert then refuses callers without one, except on
// /healthz and /readyz, so that health probes need no certificate).
func ServerTLS(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("tls_cert_file %s and tls_key_file %s: %w", certFile, keyFile, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if clientCAFile != "" {
		b, err := os.ReadFile(clientCAFile)
		if err != nil {
			return nil, fmt.Errorf("client_ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("client_ca_file %s: no PEM certificate in it (expected -----BEGIN CERTIFICATE-----)", clientCAFile)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return cfg, nil
}
