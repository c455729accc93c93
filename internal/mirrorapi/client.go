package mirrorapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Client calls an agent's API.
type Client struct {
	// BaseURL is the agent's address, such as http://127.0.0.1:8080.
	BaseURL string
	// Token is sent as a bearer token when set.
	Token string
	HTTP  *http.Client
	// Retries is how many times an idempotent call (GET, PUT, DELETE) is
	// retried after a transient failure: connection refused or reset, or
	// 502, 503, 504. POST is never retried. Negative means never.
	Retries int
	// Backoff is the wait before the first retry, doubled for each next
	// one up to 5s.
	Backoff time.Duration
}

// NewClient returns a client for the agent at baseURL that retries
// idempotent calls 4 times, from 200ms.
func NewClient(baseURL, token string) *Client {
	// The routes start with /v1: a base URL given with it (the address
	// of the API, as its paths read) means the same agent.
	base := strings.TrimSuffix(strings.TrimRight(baseURL, "/"), "/v1")
	return &Client{
		BaseURL: base, Token: token, HTTP: &http.Client{Timeout: 30 * time.Second},
		Retries: 4, Backoff: 200 * time.Millisecond,
	}
}

// APIError is an error response of the agent.
type APIError struct {
	Status int
	Body   Error
}

func (e *APIError) Error() string {
	return fmt.Sprintf("agent answered %d %s: %s", e.Status, e.Body.Code, e.Body.Message)
}

// IsCode says whether err is an APIError with code.
func IsCode(err error, code string) bool {
	var e *APIError
	return errors.As(err, &e) && e.Body.Code == code
}

// Agent returns the agent's status and its group (GET /v1/agent); an agent
// that waits answers it too.
func (c *Client) Agent(ctx context.Context) (AgentStatus, error) {
	var st AgentStatus
	err := c.do(ctx, "GET", "/v1/agent", nil, &st)
	return st, err
}

// Describe returns every mirror's status (GET /v1/mirrors).
func (c *Client) Describe(ctx context.Context) ([]Mirror, error) {
	var out DescribeResponse
	if err := c.do(ctx, http.MethodGet, "/v1/mirrors", nil, &out); err != nil {
		return nil, err
	}
	return out.Mirrors, nil
}

// Mirror returns one mirror's status (GET /v1/mirrors/{name}).
func (c *Client) Mirror(ctx context.Context, name string) (Mirror, error) {
	var out Mirror
	err := c.do(ctx, http.MethodGet, mirrorPath(name), nil, &out)
	return out, err
}

// Create creates a mirror (POST /v1/mirrors).
func (c *Client) Create(ctx context.Context, spec MirrorSpec) (Mirror, error) {
	var out Mirror
	err := c.do(ctx, http.MethodPost, "/v1/mirrors", spec, &out)
	return out, err
}

// Update changes mirror name (PUT /v1/mirrors/{name}): fields of spec left
// empty keep their value.
func (c *Client) Update(ctx context.Context, name string, spec MirrorSpec) (Mirror, error) {
	var out Mirror
	err := c.do(ctx, http.MethodPut, mirrorPath(name), spec, &out)
	return out, err
}

// Delete deletes mirror name (DELETE /v1/mirrors/{name}); force deletes a
// mirror that still has topics. Destination topics and data stay.
func (c *Client) Delete(ctx context.Context, name string, force bool) error {
	p := mirrorPath(name)
	if force {
		p += "?force=true"
	}
	return c.do(ctx, http.MethodDelete, p, nil, nil)
}

// AddTopics adds topics to mirror name (POST /v1/mirrors/{name}/topics).
func (c *Client) AddTopics(ctx context.Context, name string, topics []string) (Mirror, error) {
	return c.AddTopicsWith(ctx, name, AddTopicsRequest{Topics: topics})
}

// AddTopicsWith adds what req says to mirror name (POST
// /v1/mirrors/{name}/topics): topics, topic regexes, a failback.
func (c *Client) AddTopicsWith(ctx context.Context, name string, req AddTopicsRequest) (Mirror, error) {
	var out Mirror
	err := c.do(ctx, http.MethodPost, mirrorPath(name)+"/topics", req, &out)
	return out, err
}

// RecoverTopicsWith recovers failed topics of mirror (POST
// /v1/mirrors/{name}/topics/recover) as req says (Recreate); poll Mirror
// for the outcome.
func (c *Client) RecoverTopicsWith(ctx context.Context, mirror string, req TopicsRequest) error {
	return c.do(ctx, http.MethodPost, mirrorPath(mirror)+"/topics/recover", req, nil)
}

// PauseTopics pauses topics of mirror (POST
// /v1/mirrors/{name}/topics/pause); it returns once they are paused.
func (c *Client) PauseTopics(ctx context.Context, mirror string, topics []string) error {
	return c.do(ctx, http.MethodPost, mirrorPath(mirror)+"/topics/pause", TopicsRequest{Topics: topics}, nil)
}

// ResumeTopics resumes paused topics of mirror (POST
// /v1/mirrors/{name}/topics/resume); poll Mirror for the partitions to
// reach MIRRORING.
func (c *Client) ResumeTopics(ctx context.Context, mirror string, topics []string) error {
	return c.do(ctx, http.MethodPost, mirrorPath(mirror)+"/topics/resume", TopicsRequest{Topics: topics}, nil)
}

// StopTopics stops mirroring topics of mirror (POST
// /v1/mirrors/{name}/topics/stop) with mode StopModeFailover or
// StopModePromote; poll Mirror for the partitions to reach STOPPED.
func (c *Client) StopTopics(ctx context.Context, mirror string, topics []string, mode string) error {
	return c.do(ctx, http.MethodPost, mirrorPath(mirror)+"/topics/stop", StopTopicsRequest{Topics: topics, Mode: mode}, nil)
}

// RecoverTopics recovers failed topics of mirror (POST
// /v1/mirrors/{name}/topics/recover); poll Mirror for the outcome.
func (c *Client) RecoverTopics(ctx context.Context, mirror string, topics []string) error {
	return c.RecoverTopicsWith(ctx, mirror, TopicsRequest{Topics: topics})
}

// Offsets returns mirror name's last mirrored offsets (GET
// /v1/mirrors/{name}/offsets), of topic only when topic is not empty.
func (c *Client) Offsets(ctx context.Context, name, topic string) (OffsetsResponse, error) {
	var out OffsetsResponse
	p := mirrorPath(name) + "/offsets"
	if topic != "" {
		p += "?topic=" + url.QueryEscape(topic)
	}
	err := c.do(ctx, http.MethodGet, p, nil, &out)
	return out, err
}

// Throttle returns mirror name's throttle (GET
// /v1/mirrors/{name}/throttle); an APIError with CodeThrottleNotFound when
// it has none.
func (c *Client) Throttle(ctx context.Context, name string) (Throttle, error) {
	var out Throttle
	err := c.do(ctx, http.MethodGet, mirrorPath(name)+"/throttle", nil, &out)
	return out, err
}

// SetThrottle sets or replaces mirror name's throttle (PUT
// /v1/mirrors/{name}/throttle); it takes effect at once.
func (c *Client) SetThrottle(ctx context.Context, name string, t Throttle) (Throttle, error) {
	var out Throttle
	err := c.do(ctx, http.MethodPut, mirrorPath(name)+"/throttle", t, &out)
	return out, err
}

// RemoveThrottle lifts mirror name's throttle and its source quota (DELETE
// /v1/mirrors/{name}/throttle); a mirror without one is not an error.
func (c *Client) RemoveThrottle(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, mirrorPath(name)+"/throttle", nil, nil)
}

// OpenAPI returns the agent's OpenAPI document (GET /v1/openapi.json).
func (c *Client) OpenAPI(ctx context.Context) (json.RawMessage, error) {
	var out json.RawMessage
	err := c.do(ctx, http.MethodGet, "/v1/openapi.json", nil, &out)
	return out, err
}

func mirrorPath(name string) string { return "/v1/mirrors/" + url.PathEscape(name) }

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return err
		}
	}
	retries := c.Retries
	if method == http.MethodPost || retries < 0 {
		retries = 0
	}
	wait := c.Backoff
	if wait <= 0 {
		wait = 200 * time.Millisecond
	}
	for attempt := 0; ; attempt++ {
		transient, err := c.once(ctx, method, path, body, out)
		if err == nil || !transient || attempt >= retries {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(wait*2, 5*time.Second)
	}
}

// request is a request to the agent's path, with the token.
func (c *Client) request(ctx context.Context, method, path string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+path, body)
	if err != nil {
		return nil, err
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	return req, nil
}

func (c *Client) httpClient() *http.Client {
	if c.HTTP == nil {
		return http.DefaultClient
	}
	return c.HTTP
}

// once makes one call; transient says whether a retry may succeed.
func (c *Client) once(ctx context.Context, method, path string, body []byte, out any) (transient bool, err error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := c.request(ctx, method, path, rd)
	if err != nil {
		return false, fmt.Errorf("calling the agent: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return transientNetErr(err), fmt.Errorf("calling the agent at %s: %w (is `kmirror agent` running there? set KMIRROR_ADDR or --agent)", c.BaseURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		var e Error
		if json.Unmarshal(raw, &e) != nil || e.Code == "" {
			e = Error{Message: strings.TrimSpace(string(raw))}
		}
		switch resp.StatusCode {
		case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			// A standby stays one until the active agent fails: ask
			// the active one instead of retrying here.
			transient = e.Code != CodeNotActive
		}
		return transient, &APIError{Status: resp.StatusCode, Body: e}
	}
	if out == nil {
		return false, nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return false, fmt.Errorf("reading the agent's answer to %s %s: %w", method, path, err)
	}
	return false, nil
}

// transientNetErr says whether a failed connection may work on a retry.
func transientNetErr(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// Metric sums the samples of metric name that the agent serves at
// /metrics, over all their labels; ok is false when it serves none.
func (c *Client) Metric(ctx context.Context, name string) (sum float64, ok bool, err error) {
	req, err := c.request(ctx, http.MethodGet, "/metrics", nil)
	if err != nil {
		return 0, false, fmt.Errorf("reading the agent's metrics: %w", err)
	}
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return 0, false, fmt.Errorf("reading the agent's metrics at %s: %w", c.BaseURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, false, fmt.Errorf("reading the agent's metrics at %s: %s", c.BaseURL, resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, false, fmt.Errorf("reading the agent's metrics at %s: %w", c.BaseURL, err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		rest, found := strings.CutPrefix(line, name)
		if !found || rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		f := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, false, fmt.Errorf("reading the agent's metrics at %s: %q: %w", c.BaseURL, line, err)
		}
		sum, ok = sum+v, true
	}
	return sum, ok, nil
}
