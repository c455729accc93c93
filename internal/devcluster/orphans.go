package devcluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// A throwaway Kafka cluster keeps its brokers' logs in a directory of its
// own in the temp dir (kmirror-kafka-NAME-*), which Close removes. A
// process killed with SIGKILL runs no Close: its broker JVMs die with it
// (Pdeathsig), its directory stays. So the directory's owner file names
// every process that uses it (the one that made it, then each broker JVM
// as it starts), and every Start removes the directories whose processes
// are all gone. A directory without an owner file (one being made, or a
// DataDir) is never touched, nor is one naming a process that still runs.

// ownerFile is the name of a throwaway cluster directory's owner file: one
// process id per line.
const ownerFile = "kmirror-owners"

// tempRootPrefix starts the name of every throwaway cluster directory.
const tempRootPrefix = "kmirror-kafka-"

// addOwner records pid as a user of the throwaway cluster directory dir.
func addOwner(dir string, pid int) error {
	f, err := os.OpenFile(filepath.Join(dir, ownerFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("devcluster: recording the owner of %s: %w", dir, err)
	}
	_, err = fmt.Fprintln(f, pid)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("devcluster: recording the owner of %s: %w", dir, err)
	}
	return nil
}

// sweepOrphans removes the throwaway cluster directories in the temp dir
// whose owner processes have all exited, and returns them.
func sweepOrphans() ([]string, error) {
	dirs, err := filepath.Glob(filepath.Join(os.TempDir(), tempRootPrefix+"*"))
	if err != nil {
		return nil, fmt.Errorf("devcluster: looking for directories of killed clusters: %w", err)
	}
	var removed []string
	var errs []error
	for _, dir := range dirs {
		if !orphaned(dir) {
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("devcluster: removing %s, left by a killed cluster: %w", dir, err))
			continue
		}
		removed = append(removed, dir)
	}
	return removed, errors.Join(errs...)
}

// orphaned says whether dir has an owner file that names only processes
// that have exited. An owner file that does not read as process ids keeps
// the directory: it is not one this package wrote.
func orphaned(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, ownerFile))
	if err != nil {
		return false
	}
	lines := strings.Fields(string(b))
	if len(lines) == 0 {
		return false
	}
	for _, l := range lines {
		pid, err := strconv.Atoi(l)
		if err != nil || pid <= 0 || running(pid) {
			return false
		}
	}
	return true
}

// running says whether process pid exists. A process of another user
// exists too (EPERM), and so does one that exited and was not reaped yet:
// a reused id keeps a directory longer, never removes one early.
func running(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
