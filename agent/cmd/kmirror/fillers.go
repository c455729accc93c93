package main

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/agent/config"
	"github.com/kmirror/kmirror/agent/partition"
	"github.com/kmirror/kmirror/agent/writer"
)

// fillerChoice is the filler method an agent runs with, and why.
type fillerChoice struct {
	method partition.FillerMethod
	why    string
}

// chooseFillers turns the fillers setting into a method, asking the
// destination whether the agent may write markers. WriteTxnMarkers cannot
// be fenced: a marker a dead agent sent may still land after a new agent
// read the destination end. Auto takes markers only when bounded says how
// late a write can land is bounded: in a group, whose members stop writing
// before their session can run out and reset a connection whose markers
// stay unanswered within the write grace (writer.SetMarkersDeadline).
// Alone (coordination = "single"), coordinator fillers are fenced by
// InitProducerId.
func chooseFillers(ctx context.Context, setting string, dstOpts []kgo.Opt, bounded bool) (fillerChoice, error) {
	if setting == config.FillersCoordinator {
		return fillerChoice{partition.FillCoordinator, "fillers = \"coordinator\""}, nil
	}
	cl, err := kgo.NewClient(dstOpts...)
	if err != nil {
		return fillerChoice{}, fmt.Errorf("fillers: connecting to the destination: %w", err)
	}
	defer cl.Close()
	ok, err := writer.MarkersAuthorized(ctx, cl)
	const grant = "grant the agent's principal ALTER on the destination cluster (kafka-acls.sh --bootstrap-server DESTINATION --add " +
		"--allow-principal User:AGENT --operation Alter --operation Describe --cluster; CLUSTER_ACTION before Kafka 3.8)"
	switch {
	case setting == config.FillersMarkers && err != nil:
		return fillerChoice{}, fmt.Errorf("fillers = \"markers\": %v; %s, or set fillers = \"coordinator\"", err, grant)
	case setting == config.FillersMarkers && !ok:
		return fillerChoice{}, fmt.Errorf("fillers = \"markers\": the destination does not let the agent send WriteTxnMarkers; %s, or set fillers = \"coordinator\"", grant)
	case setting == config.FillersMarkers:
		why := "fillers = \"markers\""
		if !bounded {
			why += "; without the agents' group (coordination = \"single\") a marker sent by an agent that died can land after its successor's first write, which then fails the partition (DUPLICATE_MARKER) rather than shift an offset"
		}
		return fillerChoice{partition.FillMarkers, why}, nil
	case err != nil:
		return fillerChoice{partition.FillCoordinator, fmt.Sprintf("fillers = \"auto\": %v", err)}, nil
	case !ok:
		return fillerChoice{partition.FillCoordinator, "fillers = \"auto\": the destination does not let the agent send WriteTxnMarkers (no ALTER or CLUSTER_ACTION on the cluster)"}, nil
	case !bounded:
		return fillerChoice{partition.FillCoordinator, "fillers = \"auto\": the agent runs alone (coordination = \"single\"), and only coordinator fillers are fenced across a restart"}, nil
	}
	return fillerChoice{partition.FillMarkers, "fillers = \"auto\": the destination authorizes WriteTxnMarkers, and the agents' group bounds how late a marker can land"}, nil
}
