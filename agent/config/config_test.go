package config

import (
	"slices"
	"strings"
	"testing"
)

// TestMirrorSync: a mirror block takes the metadata sync settings, and a bad
// one stops start-up naming the setting.
func TestMirrorSync(t *testing.T) {
	cfg, err := Parse("agent.hcl", []byte(`
mirror "dr" {
  source { bootstrap_servers = ["src:9092"] }
  topics                       = ["orders"]
  groups_include               = ["app-.*"]
  groups_exclude               = ["app-test"]
  acl_include                  = []
  metadata_refresh_interval_ms = 5000
}
mirror "mig" {
  source { bootstrap_servers = ["old:9092"] }
}`))
	if err != nil {
		t.Fatal(err)
	}
	dr, mig := cfg.Mirrors[0].Spec(), cfg.Mirrors[1].Spec()
	if !slices.Equal(dr.GroupsInclude, []string{"app-.*"}) || !slices.Equal(dr.GroupsExclude, []string{"app-test"}) ||
		dr.ACLInclude == nil || len(dr.ACLInclude) != 0 || dr.MetadataRefreshIntervalMs != 5000 {
		t.Errorf("dr: %+v", dr)
	}
	if mig.GroupsInclude != nil || mig.ACLInclude != nil || mig.MetadataRefreshIntervalMs != 0 {
		t.Errorf("mig, left to the defaults: %+v", mig)
	}

	for _, c := range []struct{ setting, want string }{
		{`groups_include = ["app-("]`, "groups_include"},
		{`acl_include = ["TOPIC;orders;READ;ALLOW;alice"]`, "acl_include"},
		{`metadata_refresh_interval_ms = 10`, "metadata_refresh_interval_ms"},
	} {
		_, err := Parse("agent.hcl", []byte(`mirror "dr" {
  source { bootstrap_servers = ["src:9092"] }
  `+c.setting+`
}`))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %s", c.setting, err, c.want)
		}
	}
}
