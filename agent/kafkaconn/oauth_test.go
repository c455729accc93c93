package kafkaconn

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// TestTokenSource: OAUTHBEARER tokens come from the client-credentials
// grant, once per lifetime, and a refusal names the endpoint, not the
// secret. (kfake has no OAUTHBEARER, so no broker checks the token here.)
func TestTokenSource(t *testing.T) {
	const secret = "client-secret-4d2a-distinctive"
	var calls atomic.Int32
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, sec, ok := r.BasicAuth()
		if err := r.ParseForm(); err != nil || !ok || r.Form.Get("grant_type") != "client_credentials" {
			http.Error(w, `{"error":"invalid_request"}`, http.StatusBadRequest)
			return
		}
		if id != "kmirror" || sec != secret {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintf(w, `{"error":"invalid_client","error_description":"bad secret %s"}`, sec)
			return
		}
		n := calls.Add(1)
		fmt.Fprintf(w, `{"access_token":"tok-%d-%s","token_type":"Bearer","expires_in":3600}`, n, r.Form.Get("scope"))
	}))
	defer idp.Close()

	c := mirrorapi.Source{BootstrapServers: []string{"h:1"}, SASL: &mirrorapi.SourceSASL{
		Mechanism: "OAUTHBEARER", TokenEndpoint: idp.URL + "/token", ClientID: "kmirror", ClientSecret: secret, Scope: "kafka"}}
	if _, err := Options("source", c, nil); err != nil {
		t.Fatalf("options with a loopback http token endpoint: %v", err)
	}
	src := &tokenSource{endpoint: idp.URL + "/token", clientID: "kmirror", secret: secret, scope: "kafka"}
	for range 3 {
		a, err := src.auth(context.Background())
		if err != nil || a.Token != "tok-1-kafka" {
			t.Fatalf("token %q, %v", a.Token, err)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("%d token requests for three connections within the token's life, want 1", n)
	}
	bad := &tokenSource{endpoint: idp.URL + "/token", clientID: "kmirror", secret: "wrong-" + secret}
	_, err := bad.auth(context.Background())
	if err == nil || !strings.Contains(err.Error(), "401 invalid_client") || strings.Contains(err.Error(), secret) {
		t.Errorf("refused: %v", err)
	}
}
