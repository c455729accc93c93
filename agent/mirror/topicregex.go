package mirror

// Topics by regular expression (KIP-1279's mirror.topics.include): a
// mirror's TopicRegex entries match whole source topic names, and at every
// metadata refresh the source topics that match and that no mirror has yet
// are added to the mirror's Topics, persisted, and mirrored like topics
// added by name. Internal topics (starting with "__") never match.

import (
	"context"
	"regexp"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/kmirror/kmirror/internal/mirrorspec"
)

// matchTopics returns the names that match one of res, sorted, internal
// topics left out.
func matchTopics(res []string, names []string) []string {
	var out []string
	var compiled []*regexp.Regexp
	for _, re := range res {
		if c, err := mirrorspec.CompileTopicRegex(re); err == nil {
			compiled = append(compiled, c)
		}
	}
	for _, n := range names {
		if strings.HasPrefix(n, "__") {
			continue
		}
		for _, c := range compiled {
			if c.MatchString(n) {
				out = append(out, n)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// discoverTopics adds the source topics that match the mirror's TopicRegex
// and that no mirror has to its spec, through the registry
// (Registry.AddMatchedTopics).
func (m *Runner) discoverTopics(ctx context.Context, src *kadm.Client) {
	m.mu.Lock()
	res := slices.Clone(m.spec.TopicRegex)
	m.mu.Unlock()
	if len(res) == 0 {
		return
	}
	listed, err := src.ListTopics(ctx)
	if err != nil {
		m.log.Warn("topic_regex: listing the source topics failed; retrying at the next refresh", "error", err)
		return
	}
	matched := matchTopics(res, listed.Names())
	if len(matched) == 0 {
		return
	}
	added, err := m.cfg.Registry.AddMatchedTopics(ctx, m.rec.Spec.Name, matched)
	if err != nil {
		m.log.Error("topic_regex: adding matching source topics failed; retrying at the next refresh", "topics", added, "error", err)
		return
	}
	if len(added) > 0 {
		m.log.Info("topic_regex: source topics added", "topics", added)
	}
}
