// Package mirrorspec is a mirror as a user declares it, in one type for
// every place that takes one: the Terraform provider at plan time, the
// admin API (its requests are this type), the agent's configuration file
// and the coordinator, which persists it in the state topic.
//
// With the type come, once each: its validation (Spec.Validate and
// ValidateSource, one message per rule, each naming the field and the
// fix), its defaults (KIP-1279's lists), the merge of a partial update
// (Spec.Merge) and the parsers of its rules (topic regular expressions,
// consumer-group filters, ACL include rules, KIP-1279 config keys).
//
// It imports only the standard library, so that the provider's plugin
// binary needs nothing of the agent's Kafka clients to check a plan.
package mirrorspec
