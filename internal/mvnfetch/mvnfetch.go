// Package mvnfetch copies the runtime dependencies of a Maven POM from Maven
// Central into the user cache directory, once, with mvn: the Apache Kafka
// jars the dev cluster's real engine and the Java client run, and those of
// MirrorMaker 2, the benchmarks' peer. Every later run, and a fresh clone,
// finds them there.
package mvnfetch

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// Jars is one set of jars to fetch.
type Jars struct {
	// What names them in messages: "Apache Kafka 4.4.0".
	What string
	// Artifact is the coordinate mvn failing to fetch most likely means,
	// for the error: "org.apache.kafka:kafka_2.13:4.4.0".
	Artifact string
	// Dir is their cache directory; the jars go in Dir/libs.
	Dir string
	// POM lists them as dependencies.
	POM []byte
	// Args are more arguments for mvn: properties (-Dkafka.version=...)
	// and profiles (-Plog4j2).
	Args []string
	// Want is a jar that must be in Dir/libs once mvn is done, so that a
	// POM that resolved to something else is caught.
	Want string
}

// CacheDir returns $XDG_CACHE_HOME/kmirror/<elem...> (os.UserCacheDir).
func CacheDir(elem ...string) (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("finding the user cache directory: %w", err)
	}
	return filepath.Join(append([]string{base, "kmirror"}, elem...)...), nil
}

// mu serializes fetches in this process; mvn itself copes with two processes
// sharing ~/.m2, and the .complete marker is written last.
var mu sync.Mutex

// Fetch returns the directory holding j's jars (for `java -cp DIR/*`),
// fetching them with mvn first unless an earlier fetch completed.
func Fetch(ctx context.Context, j Jars) (string, error) {
	libs := filepath.Join(j.Dir, "libs")
	complete := filepath.Join(j.Dir, ".complete")
	if _, err := os.Stat(complete); err == nil {
		return libs, nil
	}
	mu.Lock()
	defer mu.Unlock()
	if _, err := os.Stat(complete); err == nil {
		return libs, nil
	}
	if _, err := exec.LookPath("mvn"); err != nil {
		return "", fmt.Errorf("fetching %s needs Maven (mvn) on PATH: run `make deps`, or apt-get install maven", j.What)
	}
	if err := os.RemoveAll(j.Dir); err != nil {
		return "", fmt.Errorf("clearing %s for a new fetch: %w", j.Dir, err)
	}
	if err := os.MkdirAll(j.Dir, 0o755); err != nil {
		return "", fmt.Errorf("creating %s: %w", j.Dir, err)
	}
	pom := filepath.Join(j.Dir, "pom.xml")
	if err := os.WriteFile(pom, j.POM, 0o644); err != nil {
		return "", fmt.Errorf("writing %s: %w", pom, err)
	}
	args := append([]string{"-q", "-B", "-f", pom, "dependency:copy-dependencies",
		"-DincludeScope=runtime", "-DoutputDirectory=" + libs}, j.Args...)
	fmt.Fprintf(os.Stderr, "fetching %s from Maven Central into %s (once)...\n", j.What, j.Dir)
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "mvn", args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("mvn could not fetch %s (%v); its output ends:\n%s", j.Artifact, err, tail(out.String(), 20))
	}
	if _, err := os.Stat(filepath.Join(libs, j.Want)); err != nil {
		return "", fmt.Errorf("mvn finished but %s is not in %s", j.Want, libs)
	}
	if err := os.WriteFile(complete, nil, 0o644); err != nil {
		return "", fmt.Errorf("marking %s complete: %w", j.Dir, err)
	}
	return libs, nil
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
