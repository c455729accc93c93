// Package e2e holds the end-to-end tests of the agent: real embedded Kafka
// clusters on both sides, the agent in-process or as a separate process, and
// independent readers checking that every offset matches.
package e2e
