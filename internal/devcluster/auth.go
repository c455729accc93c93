package devcluster

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	saslplain "github.com/twmb/franz-go/pkg/sasl/plain"
)

// SASL users, the authorizer and super users (DESIGN §4 "Read-only mirror
// topics"; design-review §1.7).
//
// kfake takes the principal of a connection from its SASL user
// ("User:<name>", or "User:ANONYMOUS" without SASL), enforces ACLs only when
// asked to, and lets super users bypass every check, as Kafka's
// StandardAuthorizer does for super.users.
//
// The strict layer and the fault helpers reach kfake through connections of
// their own (Cluster.opClient). With SASL or ACLs on, those authenticate as
// an internal super user, InternalUser, whose PLAIN password is random and
// known only to this process, so that the helpers keep working under any
// ACLs a test sets.

// InternalUser is the SASL user the cluster's own helpers authenticate as
// when SASL or ACLs are on. It is a super user; no SASLUser may take the
// name.
const InternalUser = "kmirror-devcluster-internal"

// saslMechanisms are the mechanisms every SASLUser gets.
var saslMechanisms = []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}

type saslUser struct{ name, pass string }

// SASLUser adds a SASL user that may authenticate with PLAIN, SCRAM-SHA-256
// or SCRAM-SHA-512 and turns SASL on: every client must then authenticate.
// It may be given more than once, once per user. The user's principal is
// "User:<name>"; with ACLs it may do only what ACLs allow, unless SuperUser
// names it.
//
// With DataDir, the users given at this Start are the cluster's users: kfake
// would otherwise restore the users of the previous start from the data dir
// (and SCRAM credentials changed through AlterUserSCRAMCredentials are not
// kept across restarts).
func SASLUser(name, password string) Option {
	return option(func(c *config) { c.saslUsers = append(c.saslUsers, saslUser{name, password}) })
}

// ACLs turns the authorizer on: every request is checked against the ACLs,
// and with none a principal may do nothing (super users excepted). Without
// it, as in a Kafka broker without authorizer.class.name, the strict layer
// answers CreateACLs, DescribeACLs and DeleteACLs with SECURITY_DISABLED
// (Lenient leaves kfake's behaviour: it stores ACLs and enforces none).
//
// Pass ACLs rather than KfakeOptions(kfake.EnableACLs()): this package must
// know the authorizer is on.
func ACLs() Option { return option(func(c *config) { c.acls = true }) }

// SuperUser makes the SASLUser name a super user (Kafka's super.users): it
// bypasses every ACL. It may be given more than once.
func SuperUser(name string) Option {
	return option(func(c *config) { c.superUsers = append(c.superUsers, name) })
}

// internalAuth is how the helpers authenticate; nil when neither SASL nor
// ACLs are on.
type internalAuth struct{ pass string }

func (a *internalAuth) opt() kgo.Opt {
	return kgo.SASL(saslplain.Auth{User: InternalUser, Pass: a.pass}.AsMechanism())
}

// newInternalAuth makes a random password for InternalUser.
func newInternalAuth() (*internalAuth, error) {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("devcluster: internal password: %w", err)
	}
	return &internalAuth{pass: hex.EncodeToString(b[:])}, nil
}

// validateAuth checks the auth options.
func (c *config) validateAuth() error {
	seen := make(map[string]bool)
	for _, u := range c.saslUsers {
		switch {
		case u.name == "":
			return errors.New("devcluster: SASLUser name must not be empty")
		case u.pass == "":
			return fmt.Errorf("devcluster: SASLUser %q: password must not be empty", u.name)
		case u.name == InternalUser:
			return fmt.Errorf("devcluster: SASLUser %q: the name is reserved for the cluster's own helpers", u.name)
		case seen[u.name]:
			return fmt.Errorf("devcluster: SASLUser %q given twice", u.name)
		}
		seen[u.name] = true
	}
	for _, s := range c.superUsers {
		if !seen[s] {
			return fmt.Errorf("devcluster: SuperUser %q is not a SASLUser", s)
		}
	}
	return nil
}

// authOptions returns the kfake options for the auth options, and how the
// helpers authenticate (nil when neither SASL nor ACLs are on).
func (c *config) authOptions() ([]kfake.Opt, *internalAuth, error) {
	if len(c.saslUsers) == 0 && !c.acls {
		return nil, nil, nil
	}
	ia, err := newInternalAuth()
	if err != nil {
		return nil, nil, err
	}
	// A PLAIN super user: SASL works on a kfake connection whether or
	// not SASL is enforced, so with ACLs alone the helpers authenticate
	// while every other client stays User:ANONYMOUS.
	opts := []kfake.Opt{kfake.Superuser("PLAIN", InternalUser, ia.pass)}
	for _, u := range c.saslUsers {
		for _, m := range saslMechanisms {
			if slices.Contains(c.superUsers, u.name) {
				opts = append(opts, kfake.Superuser(m, u.name, u.pass))
			} else {
				opts = append(opts, kfake.User(m, u.name, u.pass))
			}
		}
	}
	if len(c.saslUsers) > 0 {
		opts = append(opts, kfake.EnableSASL())
		if c.dataDir != "" {
			// kfake replaces the users given at start with the ones it
			// saved; the users of this start must win, and the
			// internal password is new at every start.
			if err := os.Remove(filepath.Join(c.dataDir, "sasl.json")); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, nil, fmt.Errorf("devcluster: resetting the saved SASL users: %w", err)
			}
		}
	}
	if c.acls {
		opts = append(opts, kfake.EnableACLs())
	}
	return opts, ia, nil
}

// installSecurityDisabled makes ACL requests fail as they do on a Kafka
// broker without an authorizer (AclApis: "No Authorizer is configured."),
// so that a client can tell that ACLs would not be enforced.
func installSecurityDisabled(kc *kfake.Cluster) {
	const msg = "No Authorizer is configured."
	e := kerr.SecurityDisabled
	for _, key := range []kmsg.Key{kmsg.DescribeACLs, kmsg.CreateACLs, kmsg.DeleteACLs} {
		kc.ControlKey(int16(key), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
			kc.KeepControl()
			switch req := kreq.(type) {
			case *kmsg.DescribeACLsRequest:
				resp := req.ResponseKind().(*kmsg.DescribeACLsResponse)
				resp.ErrorCode, resp.ErrorMessage = e.Code, kmsg.StringPtr(msg)
				return resp, nil, true
			case *kmsg.CreateACLsRequest:
				resp := req.ResponseKind().(*kmsg.CreateACLsResponse)
				for range req.Creations {
					r := kmsg.NewCreateACLsResponseResult()
					r.ErrorCode, r.ErrorMessage = e.Code, kmsg.StringPtr(msg)
					resp.Results = append(resp.Results, r)
				}
				return resp, nil, true
			case *kmsg.DeleteACLsRequest:
				resp := req.ResponseKind().(*kmsg.DeleteACLsResponse)
				for range req.Filters {
					r := kmsg.NewDeleteACLsResponseResult()
					r.ErrorCode, r.ErrorMessage = e.Code, kmsg.StringPtr(msg)
					resp.Results = append(resp.Results, r)
				}
				return resp, nil, true
			}
			return nil, nil, false
		})
	}
}

// describeAuth summarizes the auth options for the start log line.
func (c *config) describeAuth() string {
	if len(c.saslUsers) == 0 && !c.acls {
		return "none"
	}
	names := make([]string, len(c.saslUsers))
	for i, u := range c.saslUsers {
		names[i] = u.name
	}
	return fmt.Sprintf("sasl_users=[%s] acls=%t super_users=[%s]",
		strings.Join(names, ","), c.acls, strings.Join(c.superUsers, ","))
}
