package provider

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
)

func i64(n int64) tftypes.Value { return tftypes.NewValue(tftypes.Number, n) }

// TestThrottleValidation: kafka_mirror_throttle's plan-time checks, through
// the protocol as terraform validate runs them.
func TestThrottleValidation(t *testing.T) {
	s := server(t)
	ctx := context.Background()
	schemas, err := s.GetProviderSchema(ctx, &tfprotov6.GetProviderSchemaRequest{})
	if err != nil {
		t.Fatal(err)
	}
	sch := schemas.ResourceSchemas["kafka_mirror_throttle"]
	if sch == nil {
		t.Fatal("no kafka_mirror_throttle resource")
	}
	for _, name := range []string{"mirror", "rate_bytes_per_second"} {
		if a := attribute(sch, name); a == nil || !a.Required {
			t.Errorf("%s is not required: %+v", name, a)
		}
	}
	for _, name := range []string{"partitions", "source_quota"} {
		if a := attribute(sch, name); a == nil || !a.Optional || !a.Computed {
			t.Errorf("%s is not optional with a default: %+v", name, a)
		}
	}
	for _, c := range []struct {
		name string
		vals map[string]tftypes.Value
		want string // "" when valid
	}{
		{"all partitions by default", map[string]tftypes.Value{"mirror": str("dr"), "rate_bytes_per_second": i64(1 << 20)}, ""},
		{"listed", map[string]tftypes.Value{"mirror": str("dr"), "rate_bytes_per_second": i64(1), "partitions": strs("orders:0", "orders:1", "payments.v2:12")}, ""},
		{"star", map[string]tftypes.Value{"mirror": str("dr"), "rate_bytes_per_second": i64(5), "partitions": strs("*"), "source_quota": tftypes.NewValue(tftypes.Bool, true)}, ""},
		{"zero rate", map[string]tftypes.Value{"mirror": str("dr"), "rate_bytes_per_second": i64(0)}, "at least 1"},
		{"negative rate", map[string]tftypes.Value{"mirror": str("dr"), "rate_bytes_per_second": i64(-1)}, "at least 1"},
		{"bad mirror", map[string]tftypes.Value{"mirror": str("d/r"), "rate_bytes_per_second": i64(1)}, "Invalid mirror name"},
		{"no partition number", map[string]tftypes.Value{"mirror": str("dr"), "rate_bytes_per_second": i64(1), "partitions": strs("orders:0", "orders")}, `partitions[1]: "orders": use TOPIC:PARTITION`},
		{"bad partition number", map[string]tftypes.Value{"mirror": str("dr"), "rate_bytes_per_second": i64(1), "partitions": strs("orders:one")}, `partition "one" is not a number`},
		{"bad topic", map[string]tftypes.Value{"mirror": str("dr"), "rate_bytes_per_second": i64(1), "partitions": strs("a b:0")}, "not a valid Kafka topic name"},
		{"twice", map[string]tftypes.Value{"mirror": str("dr"), "rate_bytes_per_second": i64(1), "partitions": strs("a:0", "a:0")}, "listed twice"},
		{"star and more", map[string]tftypes.Value{"mirror": str("dr"), "rate_bytes_per_second": i64(1), "partitions": strs("*", "a:0")}, "list it alone"},
		{"empty list", map[string]tftypes.Value{"mirror": str("dr"), "rate_bytes_per_second": i64(1), "partitions": strs()}, "at least 1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			checkValidation(ctx, t, s, &tfprotov6.ValidateResourceConfigRequest{
				TypeName: "kafka_mirror_throttle", Config: config(t, sch, c.vals),
			}, c.want)
		})
	}
}

func TestThrottleImportIDErrors(t *testing.T) {
	s := server(t)
	ctx := context.Background()
	for _, id := range []string{"dr/orders", "", "d r"} {
		resp, err := s.ImportResourceState(ctx, &tfprotov6.ImportResourceStateRequest{TypeName: "kafka_mirror_throttle", ID: id})
		if err != nil {
			t.Fatal(err)
		}
		if got := diagText(resp.Diagnostics); !strings.Contains(got, "Invalid import ID for kafka_mirror_throttle") || !strings.Contains(got, "Import a throttle by its mirror's name") {
			t.Errorf("import %q: %q", id, got)
		}
	}
	resp, err := s.ImportResourceState(ctx, &tfprotov6.ImportResourceStateRequest{TypeName: "kafka_mirror_throttle", ID: "dr"})
	if err != nil || len(resp.Diagnostics) > 0 || len(resp.ImportedResources) != 1 {
		t.Fatalf("import dr: %v %s", err, diagText(resp.Diagnostics))
	}
}
