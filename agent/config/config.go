// Package config reads the agent's configuration file (HCL) and turns it into
// what the coordinator runs with. Unknown or invalid settings stop start-up
// with a message naming the setting and the fix.
package config

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclparse"

	"github.com/kmirror/kmirror/agent/membership"
	"github.com/kmirror/kmirror/internal/mirrorspec"
)

// File is the agent's configuration file.
type File struct {
	// Destination is how the agent reaches the destination cluster, and
	// a mirror's source block how it reaches that source: the fields of a
	// mirror spec's source. Secret values (a SASL password, token or
	// client secret, a TLS key) may be written as they are or as
	// references resolved at connect time, $${env:NAME} or
	// $${file:PATH:KEY} (HCL needs the $ doubled).
	Destination *mirrorspec.Source `hcl:"destination,block"`
	// StateTopic is the compacted topic on the destination holding the
	// agent's state (default __kmirror_state).
	StateTopic string `hcl:"state_topic,optional"`
	// Listen is the address of the agent's HTTP API.
	Listen string `hcl:"listen,optional"`
	// TokenFile holds the API's bearer tokens, one a line. Without it the
	// API listens on loopback addresses only.
	TokenFile string `hcl:"token_file,optional"`
	// MetricsListen, when set, is a second address serving only GET
	// /metrics (Prometheus), without authentication; the API listener
	// serves /metrics too, behind the bearer token.
	MetricsListen string `hcl:"metrics_listen,optional"`
	// BufferBytes bounds fetched-but-unwritten bytes (default 256 MiB).
	BufferBytes int64 `hcl:"buffer_bytes,optional"`
	// MetadataRefreshInterval is how often source topics are checked for
	// new partitions (a Go duration, default "30s").
	MetadataRefreshInterval string `hcl:"metadata_refresh_interval,optional"`
	// SecretKeyFile holds the AES-256 key that encrypts the literal
	// secrets of mirror sources in the state topic (64 hex digits).
	SecretKeyFile string `hcl:"secret_key_file,optional"`
	// TLSCertFile and TLSKeyFile make the API serve HTTPS.
	TLSCertFile string `hcl:"tls_cert_file,optional"`
	TLSKeyFile  string `hcl:"tls_key_file,optional"`
	// ClientCAFile, with TLS, requires API callers (but /healthz and
	// /readyz) to present a client certificate this CA signed.
	ClientCAFile string `hcl:"client_ca_file,optional"`
	// AgentID names this agent in the group (its static member id),
	// describe and logs (default HOSTNAME-PID).
	AgentID string `hcl:"agent_id,optional"`
	// LeaseDuration and LeaseRequestTimeout were the writer lease's
	// settings; the lease was removed, and Check says what to set
	// instead.
	LeaseDuration       string `hcl:"lease_duration,optional"`
	LeaseRequestTimeout string `hcl:"lease_request_timeout,optional"`
	// Coordination is how the agents of one destination share it:
	// "group" (the default: the agents form a group on the destination
	// and divide the mirrors' partitions among them) or "single" (this
	// agent alone writes the destination and state topic, without a
	// group: a restart writes at once; never run two, see the deploy
	// guide).
	Coordination string `hcl:"coordination,optional"`
	// GroupSessionTimeout is the group's session timeout with
	// coordination = "group" (default "10s"): the mirrors of an agent
	// that stopped answering move to the others after it.
	GroupSessionTimeout string `hcl:"group_session_timeout,optional"`
	// APIAdvertiseURL is where the other agents of the group reach this
	// agent's API (default: http(s):// and the listen address, which must
	// then name a host).
	APIAdvertiseURL string `hcl:"api_advertise_url,optional"`
	// Fillers is how invisible destination offsets (source transaction
	// markers, compaction holes) are written: "coordinator" (an empty
	// transaction aborted through the destination's transaction
	// coordinator, restart-safe on its own), "markers" (ABORT markers the
	// agent writes itself with WriteTxnMarkers, many per request; needs
	// ALTER or CLUSTER_ACTION on the destination cluster) or "auto" (the
	// default: markers when the destination authorizes them and the
	// agents' group or the writer lease bounds how late a dead agent's
	// markers can land; coordinator otherwise).
	Fillers   string   `hcl:"fillers,optional"`
	LogLevel  string   `hcl:"log_level,optional"`
	LogFormat string   `hcl:"log_format,optional"`
	Mirrors   []Mirror `hcl:"mirror,block"`
}

// Mirror declares a mirror at start-up (the admin API can add more).
type Mirror struct {
	Name               string             `hcl:"name,label"`
	Source             *mirrorspec.Source `hcl:"source,block"`
	Topics             []string           `hcl:"topics,optional"`
	TopicConfigExclude []string           `hcl:"topic_config_exclude,optional"`
	// TopicRegex mirrors every source topic whose whole name matches one
	// of these regular expressions (Go RE2), also those created later.
	TopicRegex []string `hcl:"topic_regex,optional"`
	// Metadata sync (README "Metadata sync"): the KIP's
	// mirror.groups.include, mirror.groups.exclude, mirror.acl.include and
	// mirror.metadata.refresh.interval.ms.
	GroupsInclude             []string `hcl:"groups_include,optional"`
	GroupsExclude             []string `hcl:"groups_exclude,optional"`
	ACLInclude                []string `hcl:"acl_include,optional"`
	MetadataRefreshIntervalMs int64    `hcl:"metadata_refresh_interval_ms,optional"`
}

// Load reads and checks a configuration file.
func Load(path string) (*File, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	return Parse(path, src)
}

// Parse reads and checks configuration text; name is used in messages.
func Parse(name string, src []byte) (*File, error) {
	p := hclparse.NewParser()
	f, diags := p.ParseHCL(src, name)
	if diags.HasErrors() {
		return nil, diagErr(diags)
	}
	var cfg File
	if diags := gohcl.DecodeBody(f.Body, nil, &cfg); diags.HasErrors() {
		return nil, diagErr(diags)
	}
	if err := cfg.Check(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &cfg, nil
}

func diagErr(diags hcl.Diagnostics) error {
	var msgs []string
	for _, d := range diags {
		s := d.Summary
		if d.Detail != "" {
			s += ": " + d.Detail
		}
		if d.Subject != nil {
			s = d.Subject.String() + ": " + s
		}
		msgs = append(msgs, s)
	}
	return fmt.Errorf("invalid config: %s", strings.Join(msgs, "; "))
}

// Check fills defaults and validates values, naming the setting at fault.
func (f *File) Check() error {
	if f.StateTopic == "" {
		f.StateTopic = "__kmirror_state"
	}
	if f.LogLevel == "" {
		f.LogLevel = "info"
	}
	switch f.LogLevel {
	case "trace", "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("log_level %q: use trace, debug, info, warn or error", f.LogLevel)
	}
	switch f.LogFormat {
	case "", "text", "json":
	default:
		return fmt.Errorf("log_format %q: use text or json", f.LogFormat)
	}
	if f.BufferBytes < 0 || (f.BufferBytes > 0 && f.BufferBytes < 4<<20) {
		return fmt.Errorf("buffer_bytes %d: use at least 4194304 (4 MiB), or leave it out for 256 MiB", f.BufferBytes)
	}
	if f.MetadataRefreshInterval != "" {
		d, err := time.ParseDuration(f.MetadataRefreshInterval)
		if err != nil || d < 100*time.Millisecond {
			return fmt.Errorf("metadata_refresh_interval %q: use a duration of at least 100ms, such as \"30s\"", f.MetadataRefreshInterval)
		}
	}
	if f.Destination != nil {
		if errs := mirrorspec.ValidateSource("destination", *f.Destination); len(errs) > 0 {
			return errors.New(strings.Join(errs, "; "))
		}
	}
	switch {
	case (f.TLSCertFile == "") != (f.TLSKeyFile == ""):
		return errors.New("tls_cert_file and tls_key_file: give both (the API's certificate and its private key), or neither for plain HTTP")
	case f.ClientCAFile != "" && f.TLSCertFile == "":
		return errors.New("client_ca_file: client certificates need TLS; give tls_cert_file and tls_key_file too")
	}
	if f.AgentID != "" {
		if err := membership.CheckAgentID(f.AgentID); err != nil {
			return err
		}
	}
	switch d, err := time.ParseDuration(f.LeaseDuration); {
	case err == nil && d == 0:
		return errors.New(`lease_duration: the writer lease was removed; for one agent without a group (what lease_duration = "0s" was), set coordination = "single" instead`)
	case f.LeaseDuration != "" || f.LeaseRequestTimeout != "" || f.Coordination == "lease":
		field := "lease_duration"
		switch {
		case f.Coordination == "lease":
			field = `coordination = "lease"`
		case f.LeaseDuration == "":
			field = "lease_request_timeout"
		}
		return fmt.Errorf(`%s: the writer lease was removed; remove it, and the agents form a group on the destination (coordination = "group", the default), which moves the mirrors of the lease agents still running once they stop (deploy guide, "From the writer lease to a group")`, field)
	}
	switch f.Coordination {
	case "":
		f.Coordination = CoordinationGroup
	case CoordinationGroup, CoordinationSingle:
	default:
		return fmt.Errorf("coordination %q: use group (the default: the agents divide the mirrors' partitions) or single (one agent alone, no group)", f.Coordination)
	}
	if f.GroupSessionTimeout != "" {
		d, err := time.ParseDuration(f.GroupSessionTimeout)
		if err != nil || d < time.Second {
			return fmt.Errorf("group_session_timeout %q: use a duration of at least 1s, such as \"10s\" (within the destination's group.min.session.timeout.ms and group.max.session.timeout.ms)", f.GroupSessionTimeout)
		}
		if f.Coordination != CoordinationGroup {
			return errors.New(`group_session_timeout: it applies to coordination = "group" only; remove it`)
		}
	}
	if f.APIAdvertiseURL != "" {
		u, err := url.Parse(f.APIAdvertiseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("api_advertise_url %q: give the URL other agents reach this agent's API at, such as \"http://10.0.0.5:8080\"", f.APIAdvertiseURL)
		}
	}
	switch f.Fillers {
	case "":
		f.Fillers = FillersAuto
	case FillersAuto, FillersCoordinator, FillersMarkers:
	default:
		return fmt.Errorf("fillers %q: use auto, coordinator or markers", f.Fillers)
	}
	seen := map[string]bool{}
	for _, m := range f.Mirrors {
		if seen[m.Name] {
			return fmt.Errorf("mirror %q is declared twice", m.Name)
		}
		seen[m.Name] = true
		if m.Source == nil {
			return fmt.Errorf("mirror %q: add a source block with bootstrap_servers", m.Name)
		}
		if err := m.Spec().Validate(); err != nil {
			return err
		}
	}
	return nil
}

// The values of coordination.
const (
	CoordinationGroup  = "group"
	CoordinationSingle = "single"
)

// SessionTimeout returns group_session_timeout (0 when unset: the
// membership's default).
func (f *File) SessionTimeout() time.Duration {
	d, _ := time.ParseDuration(f.GroupSessionTimeout)
	return d
}

// The values of fillers.
const (
	FillersAuto        = "auto"
	FillersCoordinator = "coordinator"
	FillersMarkers     = "markers"
)

// RefreshInterval returns metadata_refresh_interval as a duration (0 when
// unset).
func (f *File) RefreshInterval() time.Duration {
	d, _ := time.ParseDuration(f.MetadataRefreshInterval)
	return d
}

// Spec returns the mirror as the coordinator takes it.
func (m Mirror) Spec() mirrorspec.Spec {
	s := mirrorspec.Spec{Name: m.Name, Topics: m.Topics, TopicConfigExclude: m.TopicConfigExclude, TopicRegex: m.TopicRegex,
		GroupsInclude: m.GroupsInclude, GroupsExclude: m.GroupsExclude, ACLInclude: m.ACLInclude, MetadataRefreshIntervalMs: m.MetadataRefreshIntervalMs}
	if m.Source != nil {
		s.Source = *m.Source
	}
	return s
}
