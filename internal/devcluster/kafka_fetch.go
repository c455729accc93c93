package devcluster

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
)

// The Apache Kafka releases the real engine runs come from Maven Central:
// kafka_2.13 (the broker), kafka-server, kafka-tools and kafka-clients with
// their runtime dependencies, copied by mvn into the user cache directory
// once per release, where every later run (and a fresh clone) finds them.

// DefaultKafkaVersion is the release the real engine runs unless
// KafkaVersion or KMIRROR_KAFKA_VERSION says otherwise: the newest 4.x that
// Maven Central serves here.
const DefaultKafkaVersion = "4.4.0"

//go:embed kafka-pom.xml
var kafkaPOM []byte

var releaseRe = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`)

// KafkaCacheDir is where the jars of version are kept:
// $XDG_CACHE_HOME/kmirror/kafka/VERSION (os.UserCacheDir).
func KafkaCacheDir(version string) (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("finding the user cache directory for the Kafka jars: %w", err)
	}
	return filepath.Join(base, "kmirror", "kafka", version), nil
}

// fetchMu serializes fetches in this process; mvn itself copes with two
// processes sharing ~/.m2, and the .complete marker is written last.
var fetchMu sync.Mutex

// FetchKafka returns the directory holding the jars of Apache Kafka version
// (for `java -cp DIR/*`), fetching them from Maven Central with mvn first
// when they are not in the cache yet.
func FetchKafka(ctx context.Context, version string) (string, error) {
	if !releaseRe.MatchString(version) {
		return "", fmt.Errorf("kafka version %q is not a release: want MAJOR.MINOR.PATCH, such as %s", version, DefaultKafkaVersion)
	}
	dir, err := KafkaCacheDir(version)
	if err != nil {
		return "", err
	}
	libs := filepath.Join(dir, "libs")
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err == nil {
		return libs, nil
	}
	fetchMu.Lock()
	defer fetchMu.Unlock()
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err == nil {
		return libs, nil
	}
	if _, err := exec.LookPath("mvn"); err != nil {
		return "", errors.New("fetching the Kafka jars needs Maven (mvn) on PATH: run `make deps`, or apt-get install maven")
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", fmt.Errorf("clearing %s for a new fetch: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("creating %s: %w", dir, err)
	}
	pom := filepath.Join(dir, "pom.xml")
	if err := os.WriteFile(pom, kafkaPOM, 0o644); err != nil {
		return "", fmt.Errorf("writing %s: %w", pom, err)
	}
	args := []string{"-q", "-B", "-f", pom, "dependency:copy-dependencies",
		"-Dkafka.version=" + version, "-DincludeScope=runtime", "-DoutputDirectory=" + libs}
	if !strings.HasPrefix(version, "3.") {
		// 4.x logs through log4j2 and ships no binding for its slf4j 1.7.
		args = append(args, "-Plog4j2")
	}
	fmt.Fprintf(os.Stderr, "fetching Apache Kafka %s from Maven Central into %s (once)...\n", version, dir)
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "mvn", args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("mvn could not fetch org.apache.kafka:kafka_2.13:%s (%v); its output ends:\n%s", version, err, tail(out.String(), 20))
	}
	if _, err := os.Stat(filepath.Join(libs, "kafka_2.13-"+version+".jar")); err != nil {
		return "", fmt.Errorf("mvn finished but kafka_2.13-%s.jar is not in %s", version, libs)
	}
	if err := os.WriteFile(filepath.Join(dir, ".complete"), nil, 0o644); err != nil {
		return "", fmt.Errorf("marking %s complete: %w", dir, err)
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
