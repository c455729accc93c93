package devcluster

import (
	"context"
	_ "embed"
	"fmt"
	"regexp"
	"strings"

	"github.com/kmirror/kmirror/internal/mvnfetch"
)

// The Apache Kafka releases the real engine runs come from Maven Central:
// kafka_2.13 (the broker), kafka-server, kafka-tools and kafka-clients with
// their runtime dependencies, copied by mvn into the user cache directory
// once per release (package mvnfetch).

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
	dir, err := mvnfetch.CacheDir("kafka", version)
	if err != nil {
		return "", fmt.Errorf("the Kafka jars: %w", err)
	}
	return dir, nil
}

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
	args := []string{"-Dkafka.version=" + version}
	if !strings.HasPrefix(version, "3.") {
		// 4.x logs through log4j2 and ships no binding for its slf4j 1.7.
		args = append(args, "-Plog4j2")
	}
	return mvnfetch.Fetch(ctx, mvnfetch.Jars{
		What:     "Apache Kafka " + version,
		Artifact: "org.apache.kafka:kafka_2.13:" + version,
		Dir:      dir,
		POM:      kafkaPOM,
		Args:     args,
		Want:     "kafka_2.13-" + version + ".jar",
	})
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
