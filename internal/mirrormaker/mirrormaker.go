// Package mirrormaker runs Apache Kafka's MirrorMaker 2, the peer kmirror's
// benchmarks measure against: org.apache.kafka.connect.mirror.MirrorMaker in
// dedicated mode with an mm2.properties, one JVM per run, started with the
// heap and GC options bin/connect-mirror-maker.sh gives it. Its jars
// (connect-mirror and its runtime dependencies) are fetched once from Maven
// Central with mvn into the user cache directory, as the Kafka jars are
// (package mvnfetch).
package mirrormaker

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kmirror/kmirror/internal/mvnfetch"
)

// DefaultVersion is the connect-mirror release Start runs unless
// Config.Version or KMIRROR_MM2_VERSION says otherwise: the newest Maven
// Central serves. connect-mirror 4.4.0 is not there (its POM and jar answer
// 404, and the artifact's maven-metadata.xml lists releases up to 4.3.1),
// although the 4.4.0 broker jars are; a 4.3 client speaks to 4.4 brokers.
const DefaultVersion = "4.3.1"

//go:embed mirrormaker-pom.xml
var pom []byte

var releaseRe = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`)

// Fetch returns the directory holding the jars of MirrorMaker 2 release
// version (for `java -cp DIR/*`), fetching them with mvn into
// $XDG_CACHE_HOME/kmirror/mirrormaker/VERSION first when they are not
// there yet.
func Fetch(ctx context.Context, version string) (string, error) {
	if !releaseRe.MatchString(version) {
		return "", fmt.Errorf("mirrormaker: version %q is not a release: want MAJOR.MINOR.PATCH, such as %s", version, DefaultVersion)
	}
	dir, err := mvnfetch.CacheDir("mirrormaker", version)
	if err != nil {
		return "", fmt.Errorf("mirrormaker: %w", err)
	}
	libs, err := mvnfetch.Fetch(ctx, mvnfetch.Jars{
		What:     "MirrorMaker 2 (connect-mirror) " + version,
		Artifact: "org.apache.kafka:connect-mirror:" + version,
		Dir:      dir,
		POM:      pom,
		Args:     []string{"-Dmm2.version=" + version},
		Want:     "connect-mirror-" + version + ".jar",
	})
	if err != nil {
		return "", fmt.Errorf("mirrormaker: %w", err)
	}
	return libs, nil
}

// Config is one MirrorMaker 2 run: one replication flow, from the cluster
// named SourceAlias to the one named "target", with the default replication
// policy (the copy of topic T is SourceAlias.T on the target).
type Config struct {
	// Version is the connect-mirror release; "" is $KMIRROR_MM2_VERSION,
	// else DefaultVersion.
	Version string
	// SourceAlias names the source cluster in mm2.properties, in the
	// names of the remote topics and of MirrorMaker's internal topics on
	// the target; "" is "source". Runs with aliases of their own start
	// from nothing on the same clusters (MirrorMaker resumes from its
	// committed offsets otherwise).
	SourceAlias string
	// Source and Target are the clusters' bootstrap servers.
	Source, Target []string
	// Topics is MirrorMaker's topics setting: a comma-separated list of
	// regular expressions.
	Topics string
	// Tasks is tasks.max of the flow; 0 is MirrorMaker's default, 1.
	Tasks int
	// Properties are more mm2.properties entries, over the ones Start
	// writes (the clusters, the flow, replication factor 1 for
	// single-broker dev clusters, no ACL sync).
	Properties map[string]string
	// Dir is where mm2.properties, the log configuration and
	// MirrorMaker's log go.
	Dir string
}

// Process is a running MirrorMaker 2 JVM.
type Process struct {
	cmd  *exec.Cmd
	done chan struct{}
	dir  string
}

// RemoteTopic is the name the default replication policy gives topic's
// copy on the target.
func (c Config) RemoteTopic(topic string) string { return c.alias() + "." + topic }

func (c Config) alias() string {
	if c.SourceAlias == "" {
		return "source"
	}
	return c.SourceAlias
}

// JVM options as bin/connect-mirror-maker.sh and bin/kafka-run-class.sh
// give them (KAFKA_HEAP_OPTS, KAFKA_JVM_PERFORMANCE_OPTS), so that what is
// measured is MirrorMaker as shipped.
var jvmOpts = []string{
	"-Xms256M", "-Xmx2G",
	"-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
	"-XX:+ExplicitGCInvokesConcurrent", "-XX:MaxInlineLevel=15", "-Djava.awt.headless=true",
}

// Start writes cfg's mm2.properties and starts MirrorMaker. The JVM is
// killed with this process (Pdeathsig), so that a test binary that dies
// leaves no MirrorMaker behind. ctx bounds the fetch of the jars only.
func Start(ctx context.Context, cfg Config) (*Process, error) {
	switch {
	case len(cfg.Source) == 0 || len(cfg.Target) == 0:
		return nil, errors.New("mirrormaker: Source and Target are required")
	case cfg.Topics == "":
		return nil, errors.New("mirrormaker: Topics is required")
	case cfg.Dir == "":
		return nil, errors.New("mirrormaker: Dir is required")
	}
	version := cmp.Or(cfg.Version, os.Getenv("KMIRROR_MM2_VERSION"), DefaultVersion)
	if _, err := exec.LookPath("java"); err != nil {
		return nil, errors.New("mirrormaker: MirrorMaker 2 needs java on PATH (17 or newer): run `make deps`, or apt-get install openjdk-17-jre-headless")
	}
	libs, err := Fetch(ctx, version)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("mirrormaker: %w", err)
	}
	props := filepath.Join(cfg.Dir, "mm2.properties")
	if err := os.WriteFile(props, cfg.properties(), 0o600); err != nil {
		return nil, fmt.Errorf("mirrormaker: %w", err)
	}
	logFile := filepath.Join(cfg.Dir, "mm2.log")
	log4j := filepath.Join(cfg.Dir, "log4j2.properties")
	if err := os.WriteFile(log4j, []byte(fmt.Sprintf(`status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = %s
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%%d] %%p %%m (%%c)%%n
rootLogger.level = WARN
rootLogger.appenderRef.file.ref = file
`, logFile)), 0o644); err != nil {
		return nil, fmt.Errorf("mirrormaker: %w", err)
	}
	out, err := os.OpenFile(filepath.Join(cfg.Dir, "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("mirrormaker: %w", err)
	}
	args := append(slices.Clone(jvmOpts), "-Dlog4j2.configurationFile="+log4j,
		"-cp", filepath.Join(libs, "*"), "org.apache.kafka.connect.mirror.MirrorMaker", props)
	cmd := exec.Command("java", args...)
	cmd.Dir = cfg.Dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("mirrormaker: starting java %s: %w", strings.Join(args[len(args)-2:], " "), err)
	}
	p := &Process{cmd: cmd, done: make(chan struct{}), dir: cfg.Dir}
	go func() {
		_ = cmd.Wait()
		out.Close()
		close(p.done)
	}()
	return p, nil
}

// properties is cfg's mm2.properties.
func (c Config) properties() []byte {
	src := c.alias()
	flow := src + "->target"
	p := map[string]string{
		"clusters":                    src + ", target",
		src + ".bootstrap.servers":    strings.Join(c.Source, ","),
		"target.bootstrap.servers":    strings.Join(c.Target, ","),
		flow + ".enabled":             "true",
		flow + ".topics":              c.Topics,
		"target->" + src + ".enabled": "false",
		// Single-broker dev clusters.
		"replication.factor":                    "1",
		"checkpoints.topic.replication.factor":  "1",
		"heartbeats.topic.replication.factor":   "1",
		"offset-syncs.topic.replication.factor": "1",
		"offset.storage.replication.factor":     "1",
		"status.storage.replication.factor":     "1",
		"config.storage.replication.factor":     "1",
		// The dev clusters have no authorizer: syncing ACLs only logs
		// that every ten minutes.
		"sync.topic.acls.enabled": "false",
	}
	if c.Tasks > 0 {
		p["tasks.max"] = strconv.Itoa(c.Tasks)
	}
	maps.Copy(p, c.Properties)
	var b strings.Builder
	b.WriteString("# written by kmirror's mirrormaker package\n")
	for _, k := range slices.Sorted(maps.Keys(p)) {
		fmt.Fprintf(&b, "%s = %s\n", k, p[k])
	}
	return []byte(b.String())
}

// Pid is the JVM's process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the JVM has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Stop asks MirrorMaker to shut down (SIGTERM) and kills it if it has not
// within grace.
func (p *Process) Stop(grace time.Duration) {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
		return
	case <-time.After(grace):
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// LogTail is the end of MirrorMaker's output and log (warnings and
// errors), for a failing benchmark's message.
func (p *Process) LogTail() string {
	var parts []string
	for _, f := range []string{"stdout.log", "mm2.log"} {
		if b, err := os.ReadFile(filepath.Join(p.dir, f)); err == nil && len(b) > 0 {
			lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
			parts = append(parts, f+":\n"+strings.Join(lines[max(0, len(lines)-20):], "\n"))
		}
	}
	return strings.Join(parts, "\n")
}
