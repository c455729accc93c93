package mirrorspec

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Spec is a mirror as a user declares it: the body of POST /v1/mirrors,
// and of PUT /v1/mirrors/{name}, where a field left out keeps its value
// (Merge; name, when given, must match the path). The state topic keeps it
// in the same JSON.
type Spec struct {
	Name   string   `json:"name"`
	Source Source   `json:"source"`
	Topics []string `json:"topics"`
	// TopicConfigExclude is mirror.topic.properties.exclude; left out,
	// DefaultTopicConfigExclude.
	TopicConfigExclude []string `json:"topic_config_exclude,omitempty"`
	// TopicRegex are regular expressions (Go RE2, matching whole topic
	// names, like Kafka's mirror.topics.include): source topics that match,
	// now or created later, are added to Topics at the next metadata
	// refresh (internal topics, starting with "__", never).
	TopicRegex []string `json:"topic_regex"`
	// GroupsInclude is mirror.groups.include: regular expressions (whole
	// group ids) of the consumer groups whose offsets are synced; left
	// out (null), DefaultGroupsInclude; an empty list syncs none.
	GroupsInclude []string `json:"groups_include"`
	// GroupsExclude is mirror.groups.exclude: groups never synced, which
	// wins over GroupsInclude.
	GroupsExclude []string `json:"groups_exclude"`
	// ACLInclude is mirror.acl.include: rules
	// RESOURCE-TYPE;RESOURCE-NAME;OPERATION;PERMISSION;PRINCIPAL (ParseACLRule);
	// left out (null), DefaultACLInclude; an empty list syncs none.
	ACLInclude []string `json:"acl_include"`
	// MetadataRefreshIntervalMs is mirror.metadata.refresh.interval.ms:
	// how often topic configs, partitions, group offsets and ACLs are
	// synced; 0 means the agent's default (30000).
	MetadataRefreshIntervalMs int64 `json:"metadata_refresh_interval_ms,omitempty"`
}

// MinMetadataRefreshIntervalMs is the smallest
// mirror.metadata.refresh.interval.ms accepted, so that a typo cannot make
// the agent hammer both clusters.
const MinMetadataRefreshIntervalMs = 100

// KIP-1279's defaults of the lists a spec may leave out (nil).
var (
	defaultTopicConfigExclude = []string{
		// The replica-throttle lists name broker ids of the source
		// cluster; the timestamp, unclean-election and
		// min.insync.replicas settings are decided by the destination.
		"follower.replication.throttled.replicas",
		"leader.replication.throttled.replicas",
		"message.timestamp.difference.max.ms",
		"log.message.timestamp.before.max.ms",
		"log.message.timestamp.after.max.ms",
		"message.timestamp.type",
		"unclean.leader.election.enable",
		"min.insync.replicas",
		"mirror.name",
	}
	defaultGroupsInclude = []string{".*"}
	defaultACLInclude    = []string{"*"}
)

// DefaultTopicConfigExclude, DefaultGroupsInclude and DefaultACLInclude
// return KIP-1279's defaults of mirror.topic.properties.exclude,
// mirror.groups.include and mirror.acl.include, each a new slice so that no
// caller can change a default for everyone.
func DefaultTopicConfigExclude() []string { return slices.Clone(defaultTopicConfigExclude) }

// DefaultGroupsInclude: see DefaultTopicConfigExclude.
func DefaultGroupsInclude() []string { return slices.Clone(defaultGroupsInclude) }

// DefaultACLInclude: see DefaultTopicConfigExclude.
func DefaultACLInclude() []string { return slices.Clone(defaultACLInclude) }

// WithDefaults returns s with every list of settings it leaves out set to
// its default (GroupsExclude: none), as describe shows a mirror's
// effective settings; the lists are copies.
func (s Spec) WithDefaults() Spec {
	or := func(v, def []string) []string {
		if v == nil {
			return def
		}
		return slices.Clone(v)
	}
	s.TopicConfigExclude = or(s.TopicConfigExclude, DefaultTopicConfigExclude())
	s.GroupsInclude = or(s.GroupsInclude, DefaultGroupsInclude())
	s.ACLInclude = or(s.ACLInclude, DefaultACLInclude())
	s.GroupsExclude = or(s.GroupsExclude, []string{})
	return s
}

// Merge returns s updated by the partial spec p (a PUT body): each field p
// gives replaces s's, each it leaves out (nil, zero) keeps s's. Name is
// s's: a mirror cannot be renamed.
func (s Spec) Merge(p Spec) Spec {
	if p.Source.BootstrapServers != nil {
		s.Source = p.Source
	}
	for _, f := range []struct{ dst, src *[]string }{
		{&s.Topics, &p.Topics},
		{&s.TopicConfigExclude, &p.TopicConfigExclude},
		{&s.TopicRegex, &p.TopicRegex},
		{&s.GroupsInclude, &p.GroupsInclude},
		{&s.GroupsExclude, &p.GroupsExclude},
		{&s.ACLInclude, &p.ACLInclude},
	} {
		if *f.src != nil {
			*f.dst = *f.src
		}
	}
	if p.MetadataRefreshIntervalMs != 0 {
		s.MetadataRefreshIntervalMs = p.MetadataRefreshIntervalMs
	}
	return s
}

// The naming rules, as the messages of CheckMirrorName, CheckTopicName and
// CheckBootstrapServer (and the provider's schema) spell them.
const (
	MirrorNameRule      = "use 1 to 200 letters, digits, '.', '_' or '-'"
	TopicNameRule       = "1 to 249 letters, digits, '.', '_' or '-'"
	BootstrapServerRule = "HOST:PORT of a broker, such as kafka-1.example:9092"
)

var (
	mirrorName = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,200}$`)
	// topicName is Kafka's rule for topic names (legal characters, at
	// most 249).
	topicName = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)
	hostPort  = regexp.MustCompile(`^[^\s:]+:[0-9]{1,5}$|^\[[0-9a-fA-F:.]+\]:[0-9]{1,5}$`)
)

// CheckMirrorName says what is wrong with s as a mirror's name.
func CheckMirrorName(s string) error {
	if !mirrorName.MatchString(s) {
		return fmt.Errorf("%q: %s", s, MirrorNameRule)
	}
	return nil
}

// CheckBootstrapServer says what is wrong with s as a bootstrap server.
func CheckBootstrapServer(s string) error {
	if !hostPort.MatchString(s) {
		return fmt.Errorf("%q is not %s", s, BootstrapServerRule)
	}
	return nil
}

// CheckKafkaTopicName says what is wrong with t as a Kafka topic name.
func CheckKafkaTopicName(t string) error {
	if !topicName.MatchString(t) || t == "." || t == ".." {
		return fmt.Errorf("%q is not a valid Kafka topic name (%s)", t, TopicNameRule)
	}
	return nil
}

// InvalidError is a spec that breaks rules: every fault, each naming its
// field and the fix.
type InvalidError struct {
	Mirror string
	Faults []string
}

func (e *InvalidError) Error() string {
	return fmt.Sprintf("invalid mirror %q: %s", e.Mirror, strings.Join(e.Faults, "; "))
}

// Validate says what is wrong with s, every fault at once (an
// *InvalidError), or nil.
func (s Spec) Validate() error {
	var errs []string
	if err := CheckMirrorName(s.Name); err != nil {
		errs = append(errs, "name "+err.Error())
	}
	if len(s.Source.BootstrapServers) == 0 {
		errs = append(errs, "source.bootstrap_servers: give at least one HOST:PORT of the source cluster")
	}
	errs = append(errs, ValidateSource("source", s.Source)...)
	for _, b := range s.Source.BootstrapServers {
		if err := CheckBootstrapServer(b); err != nil {
			errs = append(errs, "source.bootstrap_servers: "+err.Error())
		}
	}
	errs = append(errs, ValidateTopics(s.Topics)...)
	errs = append(errs, ValidateTopicRegex(s.TopicRegex)...)
	if _, err := NewGroupFilter(s.GroupsInclude, s.GroupsExclude); err != nil {
		errs = append(errs, err.Error())
	}
	if _, err := ParseACLRules("acl_include", s.ACLInclude); err != nil {
		errs = append(errs, err.Error())
	}
	if ms := s.MetadataRefreshIntervalMs; ms != 0 && ms < MinMetadataRefreshIntervalMs {
		errs = append(errs, fmt.Sprintf("metadata_refresh_interval_ms: %d is below the minimum of %d; leave it out for the agent's default", ms, MinMetadataRefreshIntervalMs))
	}
	if len(errs) > 0 {
		return &InvalidError{Mirror: s.Name, Faults: errs}
	}
	return nil
}

// ValidateTopics says what is wrong with each name of a mirror's topics
// list, naming the field.
func ValidateTopics(topics []string) []string {
	var errs []string
	seen := map[string]bool{}
	for _, t := range topics {
		if err := CheckTopicName(t); err != nil {
			errs = append(errs, "topics: "+err.Error())
		} else if seen[t] {
			errs = append(errs, fmt.Sprintf("topics: %q is listed twice", t))
		}
		seen[t] = true
	}
	return errs
}

// CheckTopicName says what is wrong with t as the name of a mirrored
// topic: a Kafka topic name, not an internal one.
func CheckTopicName(t string) error {
	if err := CheckKafkaTopicName(t); err != nil {
		return err
	}
	if strings.HasPrefix(t, "__") {
		return fmt.Errorf("%q is an internal topic and cannot be mirrored", t)
	}
	return nil
}

// ConflictError is a topic another mirror into the same destination
// mirrors already: a destination topic has one source.
type ConflictError struct {
	Topic, Mirror, Other string
}

// ErrTopicMirrored is what a ConflictError is (errors.Is).
var ErrTopicMirrored = errors.New("topic already mirrored by another mirror")

func (e *ConflictError) Error() string {
	return fmt.Sprintf("topics: %q: %v %q; a destination topic can have one source", e.Topic, ErrTopicMirrored, e.Other)
}

func (e *ConflictError) Unwrap() error { return ErrTopicMirrored }

// CheckConflicts returns a *ConflictError for the first topic of s that
// one of others (the other mirrors into the same destination) mirrors.
func (s Spec) CheckConflicts(others []Spec) error {
	for _, o := range others {
		if o.Name == s.Name {
			continue
		}
		for _, t := range s.Topics {
			if slices.Contains(o.Topics, t) {
				return &ConflictError{Topic: t, Mirror: s.Name, Other: o.Name}
			}
		}
	}
	return nil
}
