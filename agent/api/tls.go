package api

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync"
	"time"
)

// ServerTLS returns the TLS configuration of the API listener: the
// certificate and key in certFile and keyFile and, when clientCAFile is
// given, client certificates signed by that CA verified when presented
// (Options.RequireClientCert then refuses callers without one, except on
// /healthz and /readyz, so that health probes need no certificate).
//
// The certificate is read again when its files change, so that a renewed
// certificate (cert-manager, ACME) is served without a restart; a pair that
// does not load (files half written) leaves the previous one in use.
func ServerTLS(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile}
	if err := r.load(); err != nil {
		return nil, err
	}
	cfg := &tls.Config{GetCertificate: r.get, MinVersion: tls.VersionTLS12}
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

// certReloader serves the certificate of two files, reloaded when either
// file's modification time or size changes.
type certReloader struct {
	certFile, keyFile string

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   string    // modification times and sizes of the loaded files
	checked time.Time // when the files were last looked at
}

func (r *certReloader) fileStamp() string {
	s := ""
	for _, f := range []string{r.certFile, r.keyFile} {
		if st, err := os.Stat(f); err == nil {
			s += fmt.Sprintf("%d/%d;", st.ModTime().UnixNano(), st.Size())
		}
	}
	return s
}

func (r *certReloader) load() error {
	stamp := r.fileStamp()
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("tls_cert_file %s and tls_key_file %s: %w", r.certFile, r.keyFile, err)
	}
	r.cert, r.stamp = &cert, stamp
	return nil
}

func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// Two stats a second at most, however many handshakes.
	if now := time.Now(); now.Sub(r.checked) >= 500*time.Millisecond {
		r.checked = now
		if r.fileStamp() != r.stamp {
			_ = r.load() // on failure the previous certificate stays
		}
	}
	return r.cert, nil
}
