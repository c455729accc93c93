package mirrorspec

import (
	"reflect"
	"strings"
	"testing"
)

func TestApplyConfig(t *testing.T) {
	for _, c := range []struct {
		name string
		kv   map[string]string
		want Spec
	}{
		{"refresh interval", map[string]string{"mirror.metadata.refresh.interval.ms": "500"}, Spec{MetadataRefreshIntervalMs: 500}},
		{"lists", map[string]string{
			"mirror.groups.include":           "app-.*, billing",
			"mirror.groups.exclude":           "app-test",
			"mirror.acl.include":              "TOPIC;orders.*,GROUP;*;READ",
			"mirror.topic.properties.exclude": "min.insync.replicas,retention.ms",
		}, Spec{
			GroupsInclude: []string{"app-.*", "billing"}, GroupsExclude: []string{"app-test"},
			ACLInclude: []string{"TOPIC;orders.*", "GROUP;*;READ"}, TopicConfigExclude: []string{"min.insync.replicas", "retention.ms"},
		}},
		{"empty means none, not the default", map[string]string{"mirror.acl.include": "", "mirror.groups.include": " "},
			Spec{ACLInclude: []string{}, GroupsInclude: []string{}}},
	} {
		var got Spec
		if err := ApplyConfig(&got, c.kv); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestApplyConfigErrors(t *testing.T) {
	for _, c := range []struct {
		kv   map[string]string
		want []string
	}{
		{map[string]string{"mirror.groups.inlcude": ".*"}, []string{`"mirror.groups.inlcude" is not a mirror config key`, "mirror.groups.include", "mirror.acl.include"}},
		{map[string]string{"mirror.metadata.refresh.interval.ms": "30s"}, []string{"mirror.metadata.refresh.interval.ms", `"30s" is not a positive number of milliseconds`}},
		{map[string]string{"mirror.metadata.refresh.interval.ms": "-1"}, []string{"mirror.metadata.refresh.interval.ms"}},
	} {
		err := ApplyConfig(&Spec{}, c.kv)
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("ApplyConfig(%v) = %v, want an error containing %q", c.kv, err, w)
			}
		}
	}
}
