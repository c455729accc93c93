// Command terraform-provider-kafka is the kmirror Terraform provider plugin
// (registry.terraform.io/kmirror/kafka, protocol 6): kafka_cluster_mirror and
// kafka_mirror_topic resources and data sources, driving a kmirror agent
// through its admin API.
package main

import (
	"context"
	"flag"
	"log"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/kmirror/kmirror/provider"
)

// version is set at release time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	var debug bool
	flag.BoolVar(&debug, "debug", false, "run the provider for a debugger: prints TF_REATTACH_PROVIDERS to export")
	flag.Parse()
	err := providerserver.Serve(context.Background(), provider.New(version), providerserver.ServeOpts{
		Address:         provider.Address,
		Debug:           debug,
		ProtocolVersion: 6,
	})
	if err != nil {
		log.Fatal(err)
	}
}
