package reason

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestKnownListsEveryCode parses this package and checks that Known lists
// every Code constant exactly once, each in SCREAMING_SNAKE_CASE and with a
// doc comment: a code added without a place in the list, or in the guide
// (agent/partition's reasons test), fails here first.
func TestKnownListsEveryCode(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "reason.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	declared := map[Code]string{}
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
			for i, name := range vs.Names {
				v, err := strconv.Unquote(vs.Values[i].(*ast.BasicLit).Value)
				if err != nil {
					t.Fatal(err)
				}
				declared[Code(v)] = name.Name
				if vs.Doc == nil || vs.Doc.Text() == "" {
					t.Errorf("%s (%s) has no doc comment saying what it means", name.Name, v)
				}
			}
		}
	}
	if len(declared) < 20 {
		t.Fatalf("found %d Code constants, want at least 20: has the file been split?", len(declared))
	}
	snake := regexp.MustCompile(`^[A-Z][A-Z0-9]*(_[A-Z0-9]+)*$`)
	seen := map[Code]bool{}
	for _, c := range Known() {
		if seen[c] {
			t.Errorf("Known lists %s twice", c)
		}
		seen[c] = true
		if !snake.MatchString(string(c)) {
			t.Errorf("%q is not SCREAMING_SNAKE_CASE", c)
		}
		if _, ok := declared[c]; !ok {
			t.Errorf("Known lists %s, which is not a Code constant", c)
		}
	}
	for c, name := range declared {
		if !seen[c] {
			t.Errorf("%s (%s) is not in Known", name, c)
		}
	}
}

// TestKnownIsACopy: callers cannot change the list.
func TestKnownIsACopy(t *testing.T) {
	k := Known()
	k[0] = "CHANGED"
	if Known()[0] == "CHANGED" {
		t.Error("Known returns the package's own slice")
	}
}

// TestLeaf: the package imports the standard library only.
func TestLeaf(t *testing.T) {
	paths, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if strings.Contains(strings.Split(path, "/")[0], ".") {
				t.Errorf("%s imports %s: the package must stay a leaf of the standard library", p, path)
			}
		}
	}
}

func TestError(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		code Code
		msg  string
	}{
		{"direct", Errorf(ForeignWrite, "offset %d", 7), ForeignWrite, "offset 7"},
		{"wrapped", fmt.Errorf("syncing topic: %w", Errorf(SourceTopicMissing, "source topic %q", "orders")), SourceTopicMissing, `syncing topic: source topic "orders"`},
		{"twice wrapped", fmt.Errorf("a: %w", fmt.Errorf("b: %w", Errorf(DuplicateMarker, "at %d", 3))), DuplicateMarker, "a: b: at 3"},
		{"joined", errors.Join(errors.New("other"), Errorf(RetentionLoss, "lost")), RetentionLoss, "other\nlost"},
		{"none", errors.New("plain"), "", "plain"},
		{"nil", nil, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := CodeOf(tc.err); got != tc.code {
				t.Errorf("CodeOf = %q, want %q", got, tc.code)
			}
			if tc.err != nil && tc.err.Error() != tc.msg {
				t.Errorf("message %q, want %q", tc.err.Error(), tc.msg)
			}
		})
	}
	r := New(PromoteTimedOut, "promote timed out after %s", "5m")
	if r.Code != PromoteTimedOut || r.Message != "promote timed out after 5m" {
		t.Errorf("New = %+v", r)
	}
	var e *Error
	if err := error(&r); !errors.As(err, &e) || *e != r {
		t.Errorf("&New(...) as an error: %v", err)
	}
}
