package mirror

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/kmirror/kmirror/agent/topics"
	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// TestConnection: describe shows what the last connection learned; a
// previous runner's source cluster id shows only until the source's own is
// read.
func TestConnection(t *testing.T) {
	c := &connection{log: hclog.NewNullLogger()}
	c.setClusterID("old", true)
	c.setClusterID("older", true)
	if got := c.clusterIDNow(); got != "old" {
		t.Errorf("kept cluster id %q, want the first kept", got)
	}
	c.setClusterID("new", false)
	if got := c.clusterIDNow(); got != "new" {
		t.Errorf("cluster id %q after the source's was read, want new", got)
	}
	c.setErr(errors.New("connecting to source: refused"))
	warn := topics.Finding{Cluster: "destination", Setting: "producer.id.expiration.ms", Value: "1", Message: "short"}
	c.preflight(topics.Report{TxnTimeout: time.Minute, TxnTimeoutFrom: "destination", Findings: topics.Findings{warn}})
	var st mirrorapi.Mirror
	c.statusInto(&st)
	if st.Error != "connecting to source: refused" || st.SourceClusterID != "new" || st.TxnTimeoutMs != 60000 || st.TxnTimeoutFrom != "destination" || !slices.Equal(st.Warnings, []string{warn.String()}) {
		t.Errorf("describe: %+v", st)
	}
	c.preflight(topics.Report{TxnTimeout: time.Minute, TxnTimeoutFrom: "destination"})
	if c.txnTimeoutNow() != time.Minute {
		t.Errorf("partitions start with transaction timeout %v, want the preflight's", c.txnTimeoutNow())
	}
	c.setErr(nil)
	c.statusInto(&st)
	if st.Error != "" || !slices.Equal(st.Warnings, nil) {
		t.Errorf("describe after connecting: error %q, warnings %q", st.Error, st.Warnings)
	}
}
