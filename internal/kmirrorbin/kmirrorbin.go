// Package kmirrorbin gives tests and benchmarks the kmirror binary, so that
// they can run the agent and the dev clusters as processes of their own
// (killed with SIGKILL, measured with /proc): $KMIRROR_BIN when the make
// target built it, otherwise one build of this module per test binary.
package kmirrorbin

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

var build struct {
	once sync.Once
	path string
	err  error
}

// Path returns the kmirror binary, failing tb when it cannot be built.
func Path(tb testing.TB) string {
	tb.Helper()
	if bin := os.Getenv("KMIRROR_BIN"); bin != "" {
		if st, err := os.Stat(bin); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0 {
			return bin
		}
		tb.Logf("KMIRROR_BIN=%q is not an executable file: building kmirror instead", bin)
	}
	build.once.Do(func() { build.path, build.err = buildOnce() })
	if build.err != nil {
		tb.Fatalf("building kmirror: %v", build.err)
	}
	return build.path
}

// dirPrefix names the directories builds go to; the pid of the test binary
// that made one follows, so that a later run can remove the ones whose test
// binary is gone (nothing runs at the end of a test binary without TestMain).
const dirPrefix = "kmirror-test-bin-"

func buildOnce() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("go env GOMOD: not inside the kmirror module")
	}
	removeStale()
	dir, err := os.MkdirTemp("", dirPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "kmirror")
	cmd := exec.Command("go", "build", "-o", bin, "./agent/cmd/kmirror")
	cmd.Dir = filepath.Dir(gomod)
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("go build ./agent/cmd/kmirror: %w\n%s", err, out)
	}
	return bin, nil
}

// removeStale removes build directories of test binaries that have exited.
func removeStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, d := range dirs {
		rest := strings.TrimPrefix(filepath.Base(d), dirPrefix)
		pid, err := strconv.Atoi(strings.SplitN(rest, "-", 2)[0])
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(d)
		}
	}
}
