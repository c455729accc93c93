package partition

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// troubleshootingGuide is the source of docs/guides/troubleshooting.md
// (make docs copies it).
const troubleshootingGuide = "../../templates/guides/troubleshooting.md"

// TestTroubleshootingCoversFailureReasons reads the reasons a partition can
// fail with straight from the code, every fail("...") in this package and
// every reason the coordinator fails a whole topic with (failTopic), and
// checks that the troubleshooting guide quotes each one, with placeholders
// where the reason has values. A new or reworded reason fails this test
// until the guide says what it means and what to do.
func TestTroubleshootingCoversFailureReasons(t *testing.T) {
	b, err := os.ReadFile(troubleshootingGuide)
	if err != nil {
		t.Fatal(err)
	}
	guide := string(b)
	formats := callFormats(t, ".", func(call *ast.CallExpr, _ map[string]string) (ast.Expr, bool) {
		id, ok := call.Fun.(*ast.Ident)
		return firstArg(call), ok && id.Name == "fail"
	})
	if len(formats) < 10 {
		t.Fatalf("found %d fail(...) reasons in agent/partition, want at least 10: has fail been renamed?", len(formats))
	}
	topicFormats := callFormats(t, "../coordinator", func(call *ast.CallExpr, errs map[string]string) (ast.Expr, bool) {
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "failTopic" || len(call.Args) != 4 {
			return nil, false
		}
		// failTopic(ctx, topic, partitions, err.Error()) after
		// err := fmt.Errorf("...", ...).
		if c, ok := call.Args[3].(*ast.CallExpr); ok {
			if s, ok := c.Fun.(*ast.SelectorExpr); ok && s.Sel.Name == "Error" {
				if x, ok := s.X.(*ast.Ident); ok && errs[x.Name] != "" {
					return &ast.BasicLit{Kind: token.STRING, Value: strconv.Quote(errs[x.Name])}, true
				}
			}
		}
		return call.Args[3], true
	})
	if len(topicFormats) < 2 {
		t.Fatalf("found %d failTopic reasons in agent/coordinator, want at least 2: has failTopic been renamed?", len(topicFormats))
	}
	formats = append(formats, topicFormats...)
	formats = append(formats, cannotAlign)
	for _, f := range formats {
		if !formatRE(f).MatchString(guide) {
			t.Errorf("%s does not quote the FAILED reason\n\t%s\n(verbs may be written as placeholders such as N or TOPIC): add a section for it saying what happened and what to do, then run make docs",
				troubleshootingGuide, f)
		}
	}
}

func firstArg(call *ast.CallExpr) ast.Expr {
	if len(call.Args) == 0 {
		return nil
	}
	return call.Args[0]
}

// callFormats parses the non-test Go files of dir and returns the string
// literal that match picks out of each call it accepts. match also sees
// the formats of the err := fmt.Errorf("...") assignments made earlier in
// the same block, by variable name.
func callFormats(t *testing.T, dir string, match func(*ast.CallExpr, map[string]string) (ast.Expr, bool)) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	fset := token.NewFileSet()
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			var list []ast.Stmt
			switch n := n.(type) {
			case *ast.BlockStmt:
				list = n.List
			case *ast.CaseClause:
				list = n.Body
			case *ast.CommClause:
				list = n.Body
			default:
				return true
			}
			errs := map[string]string{}
			for _, st := range list {
				if as, ok := st.(*ast.AssignStmt); ok && len(as.Lhs) == 1 && len(as.Rhs) == 1 {
					if id, ok := as.Lhs[0].(*ast.Ident); ok {
						if c, ok := as.Rhs[0].(*ast.CallExpr); ok {
							if s, ok := c.Fun.(*ast.SelectorExpr); ok && s.Sel.Name == "Errorf" {
								if lit, ok := firstArg(c).(*ast.BasicLit); ok {
									errs[id.Name], _ = strconv.Unquote(lit.Value)
								}
							}
						}
					}
				}
				// Calls in this statement but not in nested statement
				// lists, which the outer Inspect visits on their own.
				ast.Inspect(st, func(n ast.Node) bool {
					switch n.(type) {
					case *ast.BlockStmt, *ast.CaseClause, *ast.CommClause:
						return false
					}
					call, ok := n.(*ast.CallExpr)
					if !ok {
						return true
					}
					arg, ok := match(call, errs)
					if !ok {
						return true
					}
					lit, ok := arg.(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						t.Errorf("%s: a reason that is not a string literal: the guide test cannot read it", fset.Position(call.Pos()))
						return true
					}
					s, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, s)
					return true
				})
			}
			return true
		})
	}
	return out
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
