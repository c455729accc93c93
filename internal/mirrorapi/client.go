package mirrorapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Client calls an agent's API.
type Client struct {
	// BaseURL is the agent's address, such as http://127.0.0.1:8080.
	BaseURL string
	// Token is sent as a bearer token when set.
	Token string
	HTTP  *http.Client
}

// NewClient returns a client for the agent at baseURL.
func NewClient(baseURL, token string) *Client {
	return &Client{BaseURL: strings.TrimRight(baseURL, "/"), Token: token, HTTP: &http.Client{Timeout: 30 * time.Second}}
}

// APIError is an error response of the agent.
type APIError struct {
	Status int
	Body   Error
}

func (e *APIError) Error() string {
	return fmt.Sprintf("agent answered %d %s: %s", e.Status, e.Body.Code, e.Body.Message)
}

// Describe returns every mirror's status.
func (c *Client) Describe(ctx context.Context) ([]Mirror, error) {
	var out DescribeResponse
	if err := c.do(ctx, http.MethodGet, "/v1/mirrors", nil, &out); err != nil {
		return nil, err
	}
	return out.Mirrors, nil
}

func (c *Client) do(ctx context.Context, method, path string, body io.Reader, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+path, body)
	if err != nil {
		return fmt.Errorf("calling the agent: %w", err)
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("calling the agent at %s: %w (is `kmirror agent` running there? set KMIRROR_ADDR or --agent)", c.BaseURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		var e Error
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return &APIError{Status: resp.StatusCode, Body: e}
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("reading the agent's answer to %s %s: %w", method, path, err)
	}
	return nil
}
