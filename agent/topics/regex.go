package topics

import (
	"fmt"
	"regexp"
)

// ValidateRegex says what is wrong with each of a mirror's topic regular
// expressions (topic_regex, KIP-1279's mirror.topics.include), naming the
// field; the agent and the Terraform provider check them with it alike.
func ValidateRegex(res []string) []string {
	var errs []string
	seen := map[string]bool{}
	for _, re := range res {
		switch {
		case re == "":
			errs = append(errs, "topic_regex: an empty regular expression; give one that matches whole topic names, such as orders\\..*")
		case seen[re]:
			errs = append(errs, fmt.Sprintf("topic_regex: %q is listed twice", re))
		default:
			if _, err := CompileRegex(re); err != nil {
				errs = append(errs, fmt.Sprintf("topic_regex: %q is not a valid regular expression (Go RE2 syntax): %v", re, err))
			}
		}
		seen[re] = true
	}
	return errs
}

// CompileRegex compiles re anchored at both ends, so that it matches whole
// topic names as Kafka's include lists do.
func CompileRegex(re string) (*regexp.Regexp, error) {
	if _, err := regexp.Compile(re); err != nil {
		return nil, err
	}
	return regexp.Compile(`^(?:` + re + `)$`)
}
