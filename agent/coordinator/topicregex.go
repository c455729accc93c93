package coordinator

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
// and that no mirror has to its spec. It gives way to admin operations
// under way (it runs again at the next refresh): one of them may be
// waiting for this mirror to stop.
func (m *mirror) discoverTopics(ctx context.Context, src *kadm.Client) {
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
	if !adminMu.TryLock() {
		return
	}
	defer adminMu.Unlock()
	rec, ok, err := m.c.record(m.rec.Spec.Name)
	if err != nil || !ok {
		return
	}
	taken := map[string]bool{}
	for _, other := range m.c.Mirrors() {
		for _, t := range other.Topics {
			taken[t] = true
		}
	}
	var added []string
	for _, t := range matched {
		if !taken[t] && mirrorspec.CheckTopicName(t) == nil {
			added = append(added, t)
		}
	}
	if len(added) == 0 {
		return
	}
	spec := rec.Spec
	spec.Topics = append(slices.Clone(spec.Topics), added...)
	if err := m.c.Apply(ctx, spec); err != nil {
		m.log.Error("topic_regex: adding matching source topics failed; retrying at the next refresh", "topics", added, "error", err)
		return
	}
	m.log.Info("topic_regex: source topics added", "topics", added)
}
