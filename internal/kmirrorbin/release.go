package kmirrorbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// AtCommit returns kmirror as built from commit of this repository: an
// earlier release, for tests of an upgrade with agents of both releases
// running. It is built once, from `git archive` of the commit with the
// module cache of this machine, and kept in the user cache directory
// (kmirror/bin/kmirror-COMMIT), where the next test run finds it. The
// commit must be in this checkout's history (a clone, not an export).
func AtCommit(tb testing.TB, commit string) string {
	tb.Helper()
	cache, err := os.UserCacheDir()
	if err != nil {
		tb.Fatalf("kmirror at %s: %v", commit, err)
	}
	bin := filepath.Join(cache, "kmirror", "bin", "kmirror-"+commit)
	if st, err := os.Stat(bin); err == nil && st.Mode().IsRegular() {
		return bin
	}
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		tb.Fatalf("kmirror at %s: go env GOMOD: %v", commit, err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	src := tb.TempDir()
	archive := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", root, commit, src)
	if out, err := archive.CombinedOutput(); err != nil {
		tb.Fatalf("kmirror at %s: git archive: %v\n%s(the commit must be in this checkout's history: test from a git clone)", commit, err, out)
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		tb.Fatal(err)
	}
	tmp := fmt.Sprintf("%s.%d.tmp", bin, os.Getpid())
	build := exec.Command("go", "build", "-o", tmp, "./agent/cmd/kmirror")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		_ = os.Remove(tmp)
		tb.Fatalf("kmirror at %s: go build: %v\n%s", commit, err, out)
	}
	// A rename, so that a test binary running beside never runs half a
	// file.
	if err := os.Rename(tmp, bin); err != nil {
		tb.Fatal(err)
	}
	return bin
}
