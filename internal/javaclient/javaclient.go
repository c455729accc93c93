// Package javaclient runs the operations of package clientop with Apache
// Kafka's own Java client (kafka-clients), a client that shares no code with
// franz-go.
//
// The client is one Java source file, KmirrorClient.java, embedded here. It
// is compiled with javac once per source and kafka-clients version into the
// user cache directory (kmirror/javaclient/<hash>) and run with java. The
// jars are those devcluster.FetchKafka fetches for a Kafka release (once per
// machine); javac and java come from the JDK on PATH.
package javaclient

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/kmirror/kmirror/internal/clientop"
	"github.com/kmirror/kmirror/internal/devcluster"
)

//go:embed KmirrorClient.java
var source []byte

// DefaultKafkaVersion is the Kafka release whose jars a Client with neither
// KafkaVersion nor LibsDir uses.
const DefaultKafkaVersion = "4.4.0"

// Client runs the Java client of one Kafka release. The zero Client uses
// DefaultKafkaVersion.
type Client struct {
	// KafkaVersion is the release (e.g. "3.9.2") whose jars
	// devcluster.FetchKafka fetches, if not yet on this machine; "" is
	// DefaultKafkaVersion. Unused when LibsDir is set.
	KafkaVersion string
	// LibsDir is a directory holding kafka-clients-<version>.jar and its
	// dependencies; "" is the one devcluster.FetchKafka returns.
	LibsDir string
}

// Run runs op with the zero Client.
func Run(ctx context.Context, op clientop.Op) (clientop.Result, error) {
	return Client{}.Run(ctx, op)
}

// Run runs op with c's Java client and returns what it printed. Errors carry
// the tail of the client's stderr.
func (c Client) Run(ctx context.Context, op clientop.Op) (clientop.Result, error) {
	libs, err := c.Libs(ctx)
	if err != nil {
		return clientop.Result{}, err
	}
	classes, err := compile(ctx, libs)
	if err != nil {
		return clientop.Result{}, err
	}
	args := []string{
		// A short-lived client: start fast, stay small.
		"-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-cp", classes + string(os.PathListSeparator) + filepath.Join(libs, "*"),
		"KmirrorClient",
	}
	cmd := exec.CommandContext(ctx, "java", append(args, op.Args()...)...)
	return clientop.Exec(ctx, "javaclient", op, cmd)
}

// Libs returns the directory of Kafka jars c uses, running
// devcluster.FetchKafka (which fetches them once per machine) when LibsDir
// is empty.
func (c Client) Libs(ctx context.Context) (string, error) {
	if c.LibsDir != "" {
		return c.LibsDir, nil
	}
	v := c.KafkaVersion
	if v == "" {
		v = DefaultKafkaVersion
	}
	d, err := devcluster.FetchKafka(ctx, v)
	if err != nil {
		return "", fmt.Errorf("javaclient: fetching the Kafka %s jars: %w", v, err)
	}
	return d, nil
}

// ClientsVersion returns the version of the kafka-clients jar in libs.
func ClientsVersion(libs string) (string, error) {
	m, err := filepath.Glob(filepath.Join(libs, "kafka-clients-*.jar"))
	if err != nil {
		return "", err
	}
	var vs []string
	for _, p := range m {
		v := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(p), "kafka-clients-"), ".jar")
		if v != "" && v[0] >= '0' && v[0] <= '9' { // not kafka-clients-x-tests.jar and the like
			vs = append(vs, v)
		}
	}
	if len(vs) != 1 {
		return "", fmt.Errorf("javaclient: want one kafka-clients-<version>.jar in %s, found %v", libs, vs)
	}
	return vs[0], nil
}

var (
	compileMu sync.Mutex
	compiled  = map[string]string{}
)

// compile returns the directory of KmirrorClient's classes compiled against
// the jars in libs, compiling them once into the user cache directory.
func compile(ctx context.Context, libs string) (string, error) {
	compileMu.Lock()
	defer compileMu.Unlock()
	if d, ok := compiled[libs]; ok {
		return d, nil
	}
	version, err := ClientsVersion(libs)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	h.Write(source)
	h.Write([]byte("\x00kafka-clients " + version))
	key := hex.EncodeToString(h.Sum(nil))[:16]
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("javaclient: %w", err)
	}
	root := filepath.Join(cache, "kmirror", "javaclient")
	dir := filepath.Join(root, version+"-"+key)
	if _, err := os.Stat(filepath.Join(dir, "KmirrorClient.class")); err == nil {
		compiled[libs] = dir
		return dir, nil
	}
	if _, err := exec.LookPath("javac"); err != nil {
		return "", errors.New("javaclient: javac is missing: install a JDK 17 (Debian: apt-get install openjdk-17-jdk-headless)")
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("javaclient: %w", err)
	}
	// Compile into a directory of our own, then rename it into place, so
	// that concurrent test processes never see half the classes.
	tmp, err := os.MkdirTemp(root, ".build-")
	if err != nil {
		return "", fmt.Errorf("javaclient: %w", err)
	}
	defer os.RemoveAll(tmp)
	src := filepath.Join(tmp, "KmirrorClient.java")
	if err := os.WriteFile(src, source, 0o644); err != nil {
		return "", fmt.Errorf("javaclient: %w", err)
	}
	out := filepath.Join(tmp, "classes")
	cmd := exec.CommandContext(ctx, "javac", "-nowarn", "-encoding", "UTF-8",
		"-cp", filepath.Join(libs, "*"), "-d", out, src)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("javaclient: compiling KmirrorClient.java against kafka-clients %s: %w\n%s", version, err, b)
	}
	if err := os.Rename(out, dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, "KmirrorClient.class")); serr != nil {
			return "", fmt.Errorf("javaclient: %w", err)
		}
		// Another process got there first.
	}
	compiled[libs] = dir
	return dir, nil
}
