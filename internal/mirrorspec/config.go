package mirrorspec

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// The KIP-1279 mirror config keys ApplyConfig understands.
const (
	ConfigMetadataRefreshIntervalMs = "mirror.metadata.refresh.interval.ms"
	ConfigTopicPropertiesExclude    = "mirror.topic.properties.exclude"
	ConfigGroupsInclude             = "mirror.groups.include"
	ConfigGroupsExclude             = "mirror.groups.exclude"
	ConfigACLInclude                = "mirror.acl.include"
)

// ConfigKeys returns, sorted, the KIP-1279 keys ApplyConfig understands.
func ConfigKeys() []string {
	return []string{ConfigACLInclude, ConfigGroupsExclude, ConfigGroupsInclude, ConfigMetadataRefreshIntervalMs, ConfigTopicPropertiesExclude}
}

// ApplyConfig sets the fields of spec named by KIP-1279 mirror config keys,
// so that the CLI (kmirror create/update --config KEY=VALUE) and anything
// else taking the KIP's names translate them in one place. Lists are
// comma-separated; an empty value is an empty list (for
// mirror.groups.include and mirror.acl.include: sync none). Values are
// checked when the agent validates the spec; an unknown key or a refresh
// interval that is not a positive number of milliseconds is an error naming
// it.
func ApplyConfig(spec *Spec, kv map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(kv)) {
		v := kv[k]
		switch k {
		case ConfigMetadataRefreshIntervalMs:
			ms, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil || ms <= 0 {
				return fmt.Errorf("%s: %q is not a positive number of milliseconds", k, v)
			}
			spec.MetadataRefreshIntervalMs = ms
		case ConfigTopicPropertiesExclude:
			spec.TopicConfigExclude = configList(v)
		case ConfigGroupsInclude:
			spec.GroupsInclude = configList(v)
		case ConfigGroupsExclude:
			spec.GroupsExclude = configList(v)
		case ConfigACLInclude:
			spec.ACLInclude = configList(v)
		default:
			return fmt.Errorf("%q is not a mirror config key; the known keys are %s", k, strings.Join(ConfigKeys(), ", "))
		}
	}
	return nil
}

// configList splits a comma-separated config value into its trimmed,
// non-empty members; never nil, so that an empty value means "none" rather
// than "the default".
func configList(v string) []string {
	out := []string{}
	for s := range strings.SplitSeq(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
