package api_test

import (
	"crypto/tls"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kmirror/kmirror/agent/api"
	"github.com/kmirror/kmirror/internal/certs"
)

// TestServerTLSReload: a renewed certificate written over the files is
// served without a restart; a broken pair keeps the previous one.
func TestServerTLSReload(t *testing.T) {
	ca, err := certs.NewCA("reload")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func() string {
		t.Helper()
		pair, err := ca.Server("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := pair.WriteFiles(dir, "api"); err != nil {
			t.Fatal(err)
		}
		c, _ := pair.TLS()
		return string(c.Certificate[0])
	}
	first := write()
	cfg, err := api.ServerTLS(filepath.Join(dir, "api.crt"), filepath.Join(dir, "api.key"), "")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	served := func() string {
		t.Helper()
		conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return string(conn.ConnectionState().PeerCertificates[0].Raw)
	}
	if served() != first {
		t.Fatal("not serving the certificate of the files")
	}
	second := write()
	deadline := time.Now().Add(5 * time.Second)
	for served() != second {
		if time.Now().After(deadline) {
			t.Fatal("the renewed certificate is not served")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// A half-written key: the renewed certificate stays.
	if err := os.WriteFile(filepath.Join(dir, "api.key"), []byte("-----BEGIN"), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(600 * time.Millisecond)
	if served() != second {
		t.Error("a broken key file replaced the certificate")
	}

	if _, err := api.ServerTLS(filepath.Join(dir, "missing.crt"), filepath.Join(dir, "api.key"), ""); err == nil || !strings.Contains(err.Error(), "tls_cert_file") {
		t.Errorf("missing certificate: %v", err)
	}
	if _, err := api.ServerTLS(filepath.Join(dir, "api.crt"), filepath.Join(dir, "api.crt"), ""); err == nil {
		t.Error("a certificate as its own key is accepted")
	}
	caFile := filepath.Join(dir, "bad-ca.pem")
	_ = os.WriteFile(caFile, []byte("nothing"), 0o600)
	write() // a good pair again, so that only the CA file is at fault
	if _, err := api.ServerTLS(filepath.Join(dir, "api.crt"), filepath.Join(dir, "api.key"), caFile); err == nil || !strings.Contains(err.Error(), "client_ca_file") {
		t.Errorf("a CA file without a certificate: %v", err)
	}
}
