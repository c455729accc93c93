package kafkaconn

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/sasl/oauth"
)

// tokenSource gets OAUTHBEARER tokens with the OAuth 2 client-credentials
// grant (RFC 6749 §4.4), as Kafka's OAuthBearerLoginCallbackHandler does,
// and keeps one until shortly before it expires: every new broker
// connection authenticates, and the endpoint should not see one request
// per connection.
type tokenSource struct {
	endpoint, clientID, secret, scope string

	mu      sync.Mutex
	token   string
	expires time.Time
}

// tokenClient calls token endpoints; one for all, so that connections to
// an endpoint are reused.
var tokenClient = &http.Client{Timeout: 30 * time.Second}

// auth is oauth.Oauth's callback.
func (s *tokenSource) auth(ctx context.Context) (oauth.Auth, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.token != "" && time.Now().Before(s.expires) {
		return oauth.Auth{Token: s.token}, nil
	}
	tok, ttl, err := s.fetch(ctx)
	if err != nil {
		return oauth.Auth{}, err
	}
	// Renew at 80% of the lifetime, so that a connection made just
	// before expiry does not present a token that dies in flight.
	s.token, s.expires = tok, time.Now().Add(ttl*8/10)
	return oauth.Auth{Token: tok}, nil
}

func (s *tokenSource) fetch(ctx context.Context) (string, time.Duration, error) {
	form := url.Values{"grant_type": {"client_credentials"}}
	if s.scope != "" {
		form.Set("scope", s.scope)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return "", 0, fmt.Errorf("sasl.token_endpoint: %w", err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	req.SetBasicAuth(url.QueryEscape(s.clientID), url.QueryEscape(s.secret))
	resp, err := tokenClient.Do(req)
	if err != nil {
		return "", 0, fmt.Errorf("sasl.token_endpoint %s: %w", s.endpoint, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var out struct {
		AccessToken string `json:"access_token"`
		ExpiresIn   int64  `json:"expires_in"`
		Error       string `json:"error"`
	}
	_ = json.Unmarshal(body, &out)
	if resp.StatusCode != http.StatusOK {
		// The error code only: the body of a token endpoint may echo
		// what it was sent.
		return "", 0, fmt.Errorf("sasl.token_endpoint %s answered %d %s; check client_id and client_secret", s.endpoint, resp.StatusCode, out.Error)
	}
	if out.AccessToken == "" {
		return "", 0, fmt.Errorf("sasl.token_endpoint %s: no access_token in the answer", s.endpoint)
	}
	ttl := time.Duration(out.ExpiresIn) * time.Second
	if ttl <= 0 {
		ttl = 5 * time.Minute
	}
	return out.AccessToken, ttl, nil
}
