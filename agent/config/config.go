// Package config reads the agent's configuration file (HCL) and turns it into
// what the coordinator runs with. Unknown or invalid settings stop start-up
// with a message naming the setting and the fix.
package config

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclparse"

	"github.com/kmirror/kmirror/agent/coordinator"
)

// File is the agent's configuration file.
type File struct {
	Destination *Cluster `hcl:"destination,block"`
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
	MetadataRefreshInterval string   `hcl:"metadata_refresh_interval,optional"`
	LogLevel                string   `hcl:"log_level,optional"`
	LogFormat               string   `hcl:"log_format,optional"`
	Mirrors                 []Mirror `hcl:"mirror,block"`
}

// Cluster is how the agent reaches a Kafka cluster.
type Cluster struct {
	BootstrapServers []string `hcl:"bootstrap_servers"`
}

// Mirror declares a mirror at start-up (the admin API can add more).
type Mirror struct {
	Name               string   `hcl:"name,label"`
	Source             *Cluster `hcl:"source,block"`
	Topics             []string `hcl:"topics,optional"`
	TopicConfigExclude []string `hcl:"topic_config_exclude,optional"`
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

// RefreshInterval returns metadata_refresh_interval as a duration (0 when
// unset).
func (f *File) RefreshInterval() time.Duration {
	d, _ := time.ParseDuration(f.MetadataRefreshInterval)
	return d
}

// Spec returns the mirror as the coordinator takes it.
func (m Mirror) Spec() coordinator.MirrorSpec {
	s := coordinator.MirrorSpec{Name: m.Name, Topics: m.Topics, TopicConfigExclude: m.TopicConfigExclude,
		GroupsInclude: m.GroupsInclude, GroupsExclude: m.GroupsExclude, ACLInclude: m.ACLInclude, MetadataRefreshIntervalMs: m.MetadataRefreshIntervalMs}
	if m.Source != nil {
		s.Source.BootstrapServers = m.Source.BootstrapServers
	}
	return s
}
