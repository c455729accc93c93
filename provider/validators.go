package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/schema/validator"

	"github.com/kmirror/kmirror/internal/mirrorspec"
)

// nameValidator checks a string against one of the agent's naming rules
// (mirrorspec's), so that a bad name fails at plan time with the agent's
// message.
type nameValidator struct {
	what  string
	rule  string
	check func(string) error
}

var (
	_ validator.String = nameValidator{}

	mirrorNameValidator = nameValidator{what: "mirror name", rule: mirrorspec.MirrorNameRule, check: mirrorspec.CheckMirrorName}
	topicNameValidator  = nameValidator{what: "topic name", rule: mirrorspec.TopicNameRule + ", not an internal \"__\" name", check: mirrorspec.CheckTopicName}
	hostPortValidator   = nameValidator{what: "bootstrap server", rule: mirrorspec.BootstrapServerRule, check: mirrorspec.CheckBootstrapServer}
)

func (v nameValidator) Description(context.Context) string {
	return fmt.Sprintf("a valid %s: %s", v.what, v.rule)
}

func (v nameValidator) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (v nameValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if err := v.check(req.ConfigValue.ValueString()); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid "+v.what, err.Error()+".")
	}
}
