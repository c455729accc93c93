// Command terraform-provider-kafka is the kmirror Terraform provider plugin.
//
// The provider (kafka_cluster_mirror, kafka_mirror_topic, kafka_mirror_throttle)
// is not implemented yet; until it is, the binary says so and exits non-zero
// so that nobody mistakes it for a working plugin.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "terraform-provider-kafka: the kmirror provider is not implemented yet; drive the agent with `kmirror` for now")
	os.Exit(1)
}
