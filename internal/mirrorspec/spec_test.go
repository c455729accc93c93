package mirrorspec

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func valid() Spec {
	return Spec{Name: "dr", Source: Source{BootstrapServers: []string{"src-1:9092"}}, Topics: []string{"orders"}}
}

// TestValidate: every rule refuses with its own message naming the field,
// and all faults of a spec come back at once.
func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Spec)
		want []string // each a substring of one fault, in order; none means valid
	}{
		{"valid", func(*Spec) {}, nil},
		{"every list left out", func(s *Spec) { s.Topics = nil }, nil},
		{"empty lists sync none", func(s *Spec) { s.GroupsInclude, s.ACLInclude = []string{}, []string{} }, nil},
		{"bracketed IPv6 broker", func(s *Spec) { s.Source.BootstrapServers = []string{"[::1]:9092"} }, nil},
		{"bad name", func(s *Spec) { s.Name = "d r" }, []string{`name "d r": use 1 to 200 letters`}},
		{"no brokers", func(s *Spec) { s.Source.BootstrapServers = nil }, []string{"source.bootstrap_servers: give at least one HOST:PORT"}},
		{"broker without port", func(s *Spec) { s.Source.BootstrapServers = []string{"src-1"} }, []string{`source.bootstrap_servers: "src-1" is not HOST:PORT`}},
		{"broker with a port name", func(s *Spec) { s.Source.BootstrapServers = []string{"src-1:kafka"} }, []string{`"src-1:kafka" is not HOST:PORT`}},
		{"bad topic", func(s *Spec) { s.Topics = []string{"a b"} }, []string{`topics: "a b" is not a valid Kafka topic name`}},
		{"dot topic", func(s *Spec) { s.Topics = []string{".."} }, []string{`topics: ".." is not a valid Kafka topic name`}},
		{"internal topic", func(s *Spec) { s.Topics = []string{"__consumer_offsets"} }, []string{`topics: "__consumer_offsets" is an internal topic`}},
		{"topic twice", func(s *Spec) { s.Topics = []string{"a", "a"} }, []string{`topics: "a" is listed twice`}},
		{"bad regex", func(s *Spec) { s.TopicRegex = []string{"orders("} }, []string{`topic_regex: "orders(" is not a valid regular expression`}},
		{"empty regex", func(s *Spec) { s.TopicRegex = []string{""} }, []string{"topic_regex: an empty regular expression"}},
		{"bad group pattern", func(s *Spec) { s.GroupsExclude = []string{"*"} }, []string{`groups_exclude: "*" is not a valid regular expression`}},
		{"bad acl rule", func(s *Spec) { s.ACLInclude = []string{"TABLE"} }, []string{`acl_include: "TABLE": resource type`}},
		{"refresh too fast", func(s *Spec) { s.MetadataRefreshIntervalMs = 10 }, []string{"metadata_refresh_interval_ms: 10 is below the minimum of 100"}},
		{"source connection", func(s *Spec) { s.Source.SecurityProtocol = "SASL_SSL" }, []string{"source.sasl: security_protocol SASL_SSL needs a sasl block"}},
		{"several at once", func(s *Spec) { s.Name, s.Topics = "", []string{"__x"} }, []string{`name ""`, `topics: "__x" is an internal topic`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := valid()
			tc.edit(&s)
			err := s.Validate()
			var inv *InvalidError
			switch {
			case tc.want == nil && err != nil:
				t.Fatalf("Validate = %v, want nil", err)
			case tc.want == nil:
				return
			case !errors.As(err, &inv):
				t.Fatalf("Validate = %v, want an *InvalidError", err)
			}
			if len(inv.Faults) != len(tc.want) {
				t.Fatalf("faults %q, want %d like %q", inv.Faults, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(inv.Faults[i], w) {
					t.Errorf("fault %d = %q, want it to contain %q", i, inv.Faults[i], w)
				}
			}
			if !strings.HasPrefix(err.Error(), `invalid mirror "`+s.Name+`": `) {
				t.Errorf("error %q does not name the mirror", err)
			}
		})
	}
}

// TestMerge: a field a partial update gives replaces the mirror's, one it
// leaves out keeps it; an empty list is given (it means "none").
func TestMerge(t *testing.T) {
	base := valid()
	base.GroupsInclude = []string{"app-.*"}
	base.MetadataRefreshIntervalMs = 5000
	for _, tc := range []struct {
		name    string
		partial Spec
		want    func(*Spec)
	}{
		{"nothing given", Spec{}, func(*Spec) {}},
		{"topics", Spec{Topics: []string{"orders", "events"}}, func(s *Spec) { s.Topics = []string{"orders", "events"} }},
		{"empty include list", Spec{GroupsInclude: []string{}}, func(s *Spec) { s.GroupsInclude = []string{} }},
		{"source", Spec{Source: Source{BootstrapServers: []string{"b:1"}, SecurityProtocol: SSL}},
			func(s *Spec) { s.Source = Source{BootstrapServers: []string{"b:1"}, SecurityProtocol: SSL} }},
		{"source without brokers is left out", Spec{Source: Source{SecurityProtocol: SSL}}, func(*Spec) {}},
		{"interval", Spec{MetadataRefreshIntervalMs: 250}, func(s *Spec) { s.MetadataRefreshIntervalMs = 250 }},
		{"every list", Spec{TopicConfigExclude: []string{"a"}, TopicRegex: []string{"b"}, GroupsExclude: []string{"c"}, ACLInclude: []string{"TOPIC"}},
			func(s *Spec) {
				s.TopicConfigExclude, s.TopicRegex, s.GroupsExclude, s.ACLInclude = []string{"a"}, []string{"b"}, []string{"c"}, []string{"TOPIC"}
			}},
		{"name is kept", Spec{Name: "other"}, func(*Spec) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := base
			tc.want(&want)
			if got := base.Merge(tc.partial); !reflect.DeepEqual(got, want) {
				t.Errorf("Merge = %+v, want %+v", got, want)
			}
		})
	}
}

func TestCheckConflicts(t *testing.T) {
	s := valid()
	others := []Spec{{Name: "dr", Topics: []string{"orders"}}, {Name: "eu", Topics: []string{"payments", "orders"}}}
	err := s.CheckConflicts(others)
	var c *ConflictError
	if !errors.As(err, &c) || c.Topic != "orders" || c.Other != "eu" || !errors.Is(err, ErrTopicMirrored) {
		t.Fatalf("CheckConflicts = %v, want orders taken by eu (its own mirror ignored)", err)
	}
	if want := `topics: "orders": topic already mirrored by another mirror "eu"; a destination topic can have one source`; err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
	if err := s.CheckConflicts(others[:1]); err != nil {
		t.Errorf("a mirror conflicts with itself: %v", err)
	}
}

// TestWithDefaults: describe's effective settings; a list given stays, and
// the defaults are copies no caller can change for everyone.
func TestWithDefaults(t *testing.T) {
	got := valid().WithDefaults()
	if !reflect.DeepEqual(got.GroupsInclude, []string{".*"}) || !reflect.DeepEqual(got.ACLInclude, []string{"*"}) ||
		got.GroupsExclude == nil || len(got.GroupsExclude) != 0 || len(got.TopicConfigExclude) != 9 {
		t.Errorf("WithDefaults = %+v", got)
	}
	got.TopicConfigExclude[0] = "changed"
	if DefaultTopicConfigExclude()[0] == "changed" {
		t.Error("DefaultTopicConfigExclude shares its slice")
	}
	s := valid()
	s.ACLInclude = []string{}
	if got := s.WithDefaults(); got.ACLInclude == nil || len(got.ACLInclude) != 0 {
		t.Errorf("an empty acl_include became %q", got.ACLInclude)
	}
}
