package provider

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestDocsUpToDate regenerates the provider documentation the way `make
// docs` does (tools/docs.sh: tfplugindocs over templates/ and examples/
// with the schema of the provider in this tree) into a temporary directory
// and fails when docs/ differs from it.
func TestDocsUpToDate(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	fresh := filepath.Join(t.TempDir(), "docs")
	cmd := exec.Command(filepath.Join(root, "tools", "docs.sh"), fresh)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tools/docs.sh: %v\n%s", err, out)
	}
	want, err := readTree(fresh)
	if err != nil {
		t.Fatal(err)
	}
	got, err := readTree(filepath.Join(root, "docs"))
	if err != nil {
		t.Fatal(err)
	}
	var stale []string
	for name, b := range want {
		switch g, ok := got[name]; {
		case !ok:
			stale = append(stale, name+" (missing)")
		case !bytes.Equal(g, b):
			stale = append(stale, name+" (differs)")
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			stale = append(stale, name+" (not generated: put guides in templates/guides)")
		}
	}
	if len(stale) > 0 {
		slices.Sort(stale)
		t.Fatalf("docs/ is stale: run make docs\n  %s", strings.Join(stale, "\n  "))
	}
	if len(want) == 0 {
		t.Fatal("tools/docs.sh generated nothing")
	}
}

// readTree reads every file under dir, by slash-separated relative path.
func readTree(dir string) (map[string][]byte, error) {
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		files[filepath.ToSlash(rel)] = b
		return nil
	})
	return files, err
}
