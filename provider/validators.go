package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
)

// nameValidator checks a string against one of the agent's naming rules,
// so that a bad name fails at plan time with the rule spelled out.
type nameValidator struct {
	what  string
	rule  string
	valid func(string) bool
}

var (
	_ validator.String = nameValidator{}

	mirrorNameValidator = nameValidator{what: "mirror name", rule: mirrorNameRule, valid: mirrorNameRE.MatchString}
	topicNameValidator  = nameValidator{what: "topic name", rule: topicNameRule, valid: validTopic}
	hostPortValidator   = nameValidator{what: "bootstrap server", rule: hostPortRule, valid: hostPortRE.MatchString}
)

func (v nameValidator) Description(context.Context) string {
	return fmt.Sprintf("a valid %s: %s", v.what, v.rule)
}

func (v nameValidator) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (v nameValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if s := req.ConfigValue.ValueString(); !v.valid(s) {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid "+v.what, fmt.Sprintf("%q is not a valid %s: %s.", s, v.what, v.rule))
	}
}
