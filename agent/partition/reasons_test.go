package partition

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/kmirror/kmirror/internal/reason"
)

// troubleshootingGuide is the source of docs/guides/troubleshooting.md
// (make docs copies it).
const troubleshootingGuide = "../../templates/guides/troubleshooting.md"

// reasonSource is where the codes are declared.
const reasonSource = "../../internal/reason/reason.go"

// TestTroubleshootingGuideKeyedByCode checks the guide against the code:
// it has one section, headed by the code alone, for every code of
// reason.Known and none for a code that does not exist; every reason the
// agent gives with a literal message (each fail(...) and failRealign(...)
// of this package, each reason.New and reason.Errorf here and in the
// mirror runner) carries a code of package reason, not a string, and the
// section of that code quotes the message, with placeholders where it has
// values. A new or reworded reason fails this test until the guide says
// what it means and what to do.
func TestTroubleshootingGuideKeyedByCode(t *testing.T) {
	b, err := os.ReadFile(troubleshootingGuide)
	if err != nil {
		t.Fatal(err)
	}
	sections := guideSections(string(b))
	names := codeNames(t)
	for _, c := range reason.Known() {
		if _, ok := sections[c]; !ok {
			t.Errorf("%s has no section \"## %s\": add one saying what it means and what to do, then run make docs", troubleshootingGuide, c)
		}
	}
	for c := range sections {
		if _, ok := names[c]; !ok {
			t.Errorf("%s has a section for %s, which is not a code of package reason", troubleshootingGuide, c)
		}
	}

	uses := reasonUses(t, ".", names, true)
	fails := 0
	for _, u := range uses {
		if u.fn == "fail" || u.fn == "failRealign" {
			fails++
		}
	}
	if fails < 10 {
		t.Fatalf("found %d fail(...) reasons in agent/partition, want at least 10: has fail been renamed?", fails)
	}
	topicUses := reasonUses(t, "../mirror", names, false)
	if len(topicUses) < 5 {
		t.Fatalf("found %d reason.New reasons in agent/mirror, want at least 5: have they been renamed?", len(topicUses))
	}
	uses = append(uses, topicUses...)
	uses = append(uses, reasonUse{at: "cannotAlign", code: reason.RealignFailed, msg: cannotAlign})
	for _, u := range uses {
		if u.code == "" || u.msg == "" {
			continue // reported by reasonUses, or not a literal
		}
		msg := u.msg
		if u.fn == "failRealign" {
			msg += "; " + recoverHint
		}
		if !formatRE(msg).MatchString(sections[u.code]) {
			t.Errorf("%s: section %s of %s does not quote the reason\n\t%s\n(verbs may be written as placeholders such as N or TOPIC): quote it there, saying what happened and what to do, then run make docs",
				u.at, u.code, troubleshootingGuide, msg)
		}
	}
}

// guideSections splits the guide at its "## " headings that are a code
// (upper case, digits and '_'), by code.
func guideSections(guide string) map[reason.Code]string {
	out := map[reason.Code]string{}
	var cur reason.Code
	for line := range strings.SplitSeq(guide, "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			cur = ""
			if codeRE.MatchString(h) {
				cur = reason.Code(h)
				out[cur] = ""
			}
			continue
		}
		if cur != "" {
			out[cur] += line + "\n"
		}
	}
	return out
}

var codeRE = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)

// codeNames reads the Code constants of package reason: value → name.
func codeNames(t *testing.T) map[reason.Code]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), reasonSource, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[reason.Code]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Code" {
				continue
			}
			for i, n := range vs.Names {
				v, err := strconv.Unquote(vs.Values[i].(*ast.BasicLit).Value)
				if err != nil {
					t.Fatal(err)
				}
				out[reason.Code(v)] = n.Name
			}
		}
	}
	if len(out) != len(reason.Known()) {
		t.Fatalf("%s declares %d codes, reason.Known lists %d", reasonSource, len(out), len(reason.Known()))
	}
	return out
}

// reasonUse is one place that gives a reason.
type reasonUse struct {
	at   string
	fn   string // fail, failRealign, New, Errorf, or Error for a reason.Error literal
	code reason.Code
	msg  string // the literal message or format; "" when it is built
}

// reasonUses parses the non-test Go files of dir and returns every call of
// reason.New and reason.Errorf, of fail and failRealign (with fails: this
// package's) and every reason.Error literal with a Code, failing the test
// where the code is not a constant of package reason (a string converts to
// Code silently) and where fail's reason is not a literal (this test could
// not read it).
func reasonUses(t *testing.T, dir string, names map[reason.Code]string, fails bool) []reasonUse {
	t.Helper()
	byName := map[string]reason.Code{}
	for c, n := range names {
		byName[n] = c
	}
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []reasonUse
	fset := token.NewFileSet()
	codeOf := func(e ast.Expr, at string) reason.Code {
		if sel, ok := e.(*ast.SelectorExpr); ok {
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "reason" {
				if c, ok := byName[sel.Sel.Name]; ok {
					return c
				}
			}
		}
		t.Errorf("%s: the reason's code is not a constant of package reason", at)
		return ""
	}
	literal := func(e ast.Expr) string {
		lit, ok := e.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return ""
		}
		s, err := strconv.Unquote(lit.Value)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if n == nil {
				return false
			}
			at := fset.Position(n.Pos()).String()
			switch n := n.(type) {
			case *ast.CallExpr:
				var fn string
				switch fun := n.Fun.(type) {
				case *ast.Ident:
					if fails && (fun.Name == "fail" || fun.Name == "failRealign") {
						fn = fun.Name
					}
				case *ast.SelectorExpr:
					if x, ok := fun.X.(*ast.Ident); ok && x.Name == "reason" && (fun.Sel.Name == "New" || fun.Sel.Name == "Errorf") {
						fn = fun.Sel.Name
					}
				}
				if fn == "" {
					return true
				}
				if len(n.Args) < 2 {
					t.Errorf("%s: %s without a code and a message", at, fn)
					return true
				}
				u := reasonUse{at: at, fn: fn, code: codeOf(n.Args[0], at), msg: literal(n.Args[1])}
				if u.msg == "" && (fn == "fail" || fn == "failRealign") {
					t.Errorf("%s: a reason that is not a string literal: the guide test cannot read it", at)
				}
				out = append(out, u)
			case *ast.CompositeLit:
				sel, ok := n.Type.(*ast.SelectorExpr)
				if !ok || sel.Sel.Name != "Error" {
					return true
				}
				if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "reason" {
					return true
				}
				u := reasonUse{at: at, fn: "Error"}
				for _, el := range n.Elts {
					kv, ok := el.(*ast.KeyValueExpr)
					if !ok {
						continue
					}
					switch k, _ := kv.Key.(*ast.Ident); {
					case k == nil:
					case k.Name == "Code":
						if sel, ok := kv.Value.(*ast.SelectorExpr); ok {
							if x, isID := sel.X.(*ast.Ident); !isID || x.Name != "reason" {
								continue // a code read back (pr.ReasonCode, f.code): checked where it was set
							}
						}
						u.code = codeOf(kv.Value, at)
					case k.Name == "Message":
						u.msg = literal(kv.Value)
					}
				}
				out = append(out, u)
			}
			return true
		})
	}
	return out
}

// TestReasonsSetWithCodes: in this package, the coordinator and the
// mirror runner, a reason reaches a status or a persisted record only with
// its code: no direct assignment to a Reason field outside setReasonLocked,
// and no partitionRecord literal with a Reason but no ReasonCode.
func TestReasonsSetWithCodes(t *testing.T) {
	for _, dir := range []string{".", "../coordinator", "../mirror"} {
		paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		fset := token.NewFileSet()
		for _, p := range paths {
			if strings.HasSuffix(p, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, p, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if ok && fd.Name.Name == "setReasonLocked" {
					continue
				}
				ast.Inspect(d, func(n ast.Node) bool {
					switch n := n.(type) {
					case *ast.AssignStmt:
						for _, l := range n.Lhs {
							if sel, ok := l.(*ast.SelectorExpr); ok && sel.Sel.Name == "Reason" {
								t.Errorf("%s: sets a Reason field directly: use setReasonLocked, which sets its code too", fset.Position(n.Pos()))
							}
						}
					case *ast.CompositeLit:
						if id, ok := n.Type.(*ast.Ident); !ok || id.Name != "partitionRecord" {
							return true
						}
						var hasReason, hasCode bool
						for _, el := range n.Elts {
							if kv, ok := el.(*ast.KeyValueExpr); ok {
								if k, ok := kv.Key.(*ast.Ident); ok {
									hasReason = hasReason || k.Name == "Reason"
									hasCode = hasCode || k.Name == "ReasonCode"
								}
							}
						}
						if hasReason && !hasCode {
							t.Errorf("%s: a partitionRecord with a Reason and no ReasonCode", fset.Position(n.Pos()))
						}
					}
					return true
				})
			}
		}
	}
}

// TestFailureCodes: a failure's code is what reason.CodeOf finds, through
// wrapping; after a recover, a failure a recover may clear becomes
// REALIGN_FAILED with its hint replaced, and any other keeps its code and
// message.
func TestFailureCodes(t *testing.T) {
	for _, tc := range []struct {
		name       string
		err        error
		recovering bool
		code       reason.Code
		msg        string
	}{
		{"plain", fail(reason.ForeignWrite, "the destination has a record at offset %d that the agent did not write (a foreign write to a mirror topic)", 7), false,
			reason.ForeignWrite, "the destination has a record at offset 7 that the agent did not write (a foreign write to a mirror topic)"},
		{"plain after a recover", fail(reason.ForeignWrite, "the destination has a record at offset %d", 7), true,
			reason.ForeignWrite, "the destination has a record at offset 7"},
		{"realign", failRealign(reason.DuplicateMarker, "duplicate transaction marker at destination offset %d where the source has a visible record", 9), false,
			reason.DuplicateMarker, "duplicate transaction marker at destination offset 9 where the source has a visible record; recover the partition to re-align it"},
		{"realign after a recover", failRealign(reason.DuplicateMarker, "duplicate transaction marker at destination offset %d where the source has a visible record", 9), true,
			reason.RealignFailed, "duplicate transaction marker at destination offset 9 where the source has a visible record; " + cannotAlign},
		{"wrapped", errors.Join(errors.New("context"), failRealign(reason.DestinationAhead, "destination log end %d is beyond the source high watermark %d", 5, 3)), false,
			reason.DestinationAhead, "destination log end 5 is beyond the source high watermark 3; recover the partition to re-align it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f *failure
			if !errors.As(tc.err, &f) {
				t.Fatalf("%v is not a failure", tc.err)
			}
			if got := reason.CodeOf(tc.err); got != f.code {
				t.Errorf("reason.CodeOf = %s, want the failure's %s", got, f.code)
			}
			if got := f.status(tc.recovering); got.Code != tc.code || got.Message != tc.msg {
				t.Errorf("status(%v) = %s %q, want %s %q", tc.recovering, got.Code, got.Message, tc.code, tc.msg)
			}
		})
	}
}

// verbRE matches a fmt verb.
var verbRE = regexp.MustCompile(`%[-+# 0]*[0-9]*(?:\.[0-9]+)?[a-zA-Z]`)

// formatRE matches a format's text with anything in place of each verb.
func formatRE(format string) *regexp.Regexp {
	parts := verbRE.Split(format, -1)
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile(strings.Join(parts, `.+?`))
}
