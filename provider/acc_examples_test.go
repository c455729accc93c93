package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io/fs"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/kmirror/kmirror/agent/api"
	"github.com/kmirror/kmirror/internal/mirrorapi"
)

// TestAccExamples applies every Terraform example under examples/ with the
// real terraform (or tofu) CLI against an in-process agent and dev
// clusters, so that no example in the docs goes stale. Examples are found
// by walking the directory: a new resources/<type>/ or data-sources/<type>/
// is covered without changing this test.
//
// Each directory with .tf files is copied to a fresh working directory and,
// because the docs' examples are fragments, completed there:
//   - a required_providers block when the example has none;
//   - the resource examples (resources/<type>/resource.tf) declaring the
//     resources it refers to without declaring them, such as
//     kafka_cluster_mirror.dr;
//   - an override file (Terraform's *_override.tf merging) pointing its
//     provider block at the test agent and kafka_cluster_mirror.dr's source
//     at the source dev cluster; CA files it reads with file() hold the CA
//     of a TLS listener of the agent;
//   - the well-known variables (agent_url, token, source bootstrap) and
//     KMIRROR_ADDR / KMIRROR_TOKEN.
//
// Data-source examples read mirror "dr" with topic "orders", which the test
// creates first. The example then goes through init, validate, apply; every
// kafka_cluster_mirror and kafka_mirror_topic in the state must exist on the
// agent; each import.sh command imports its resource back after a state rm;
// destroy must remove the mirrors it created.
func TestAccExamples(t *testing.T) {
	tf := accTerraformPath(t)
	reattach := serveProvider(t)
	root, err := filepath.Abs("../examples")
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".tf") && !slices.Contains(dirs, filepath.Dir(path)) {
			dirs = append(dirs, filepath.Dir(path))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 7 {
		t.Fatalf("found %d example directories under %s, want at least 7 (provider, 2 resources, 3 data sources, quickstart)", len(dirs), root)
	}
	for _, dir := range dirs {
		rel, _ := filepath.Rel(root, dir)
		t.Run(filepath.ToSlash(rel), func(t *testing.T) {
			runExample(t, tf, reattach, root, dir, filepath.ToSlash(rel))
		})
	}
}

// accTerraformPath is the CLI the acceptance tests drive.
func accTerraformPath(t *testing.T) string {
	t.Helper()
	if os.Getenv("TF_ACC") == "" {
		t.Skip("acceptance test: set TF_ACC=1 (make testacc)")
	}
	if tf := os.Getenv("TF_ACC_TERRAFORM_PATH"); tf != "" {
		return tf
	}
	tf, err := exec.LookPath("terraform")
	if err != nil {
		t.Fatal("no terraform on PATH: set TF_ACC_TERRAFORM_PATH (make testacc does)")
	}
	return tf
}

var (
	// pemFileRE finds the CA files an example reads, file("${path.module}/x.pem").
	pemFileRE = regexp.MustCompile(`file\("\$\{path\.module\}/([^"/]+\.pem)"\)`)
	// resourceRefRE finds a reference to a kafka_* resource, TYPE.NAME (not
	// to a data source, data.TYPE.NAME).
	resourceRefRE = regexp.MustCompile(`(^|[^.\w"])(kafka_\w+)\.(\w+)\b`)
	// importRE is a line of an import.sh.
	importRE = regexp.MustCompile(`(?m)^terraform import (\S+) (\S+)\s*$`)
)

func runExample(t *testing.T, tf, reattach, root, dir, name string) {
	e := newAccEnv(t)
	ctx := context.Background()
	// The quickstart mirrors the demo's topics, which must exist on the
	// source: a topic that does not fails its creation.
	for _, topic := range []string{"payments", "customers"} {
		if _, err := kadm.NewClient(e.srcCl).CreateTopic(ctx, 3, -1, nil, topic); err != nil {
			t.Fatal(err)
		}
	}
	tlsSrv := httptest.NewTLSServer(api.Handler(e.co, api.Options{Tokens: []string{accToken}}))
	t.Cleanup(tlsSrv.Close)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsSrv.Certificate().Raw})

	work := t.TempDir()
	var config strings.Builder
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, ent := range entries {
		if ent.IsDir() || !strings.HasSuffix(ent.Name(), ".tf") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, ent.Name()))
		if err != nil {
			t.Fatal(err)
		}
		config.Write(b)
		writeFile(t, filepath.Join(work, ent.Name()), b)
	}
	src := config.String()
	declares := func(kind, typ, name string) bool {
		return regexp.MustCompile(fmt.Sprintf(`(?m)^%s "%s" "%s"`, kind, typ, name)).MatchString(src)
	}

	var harness, override strings.Builder
	if !strings.Contains(src, "required_providers") {
		harness.WriteString(accRequiredProviders("kafka") + "\n")
	}
	// Every example configures the provider and calls the agent at least once.
	harness.WriteString("data \"kafka_cluster_mirrors\" \"harness\" {}\n\n")
	// Resources the example refers to but does not declare come from the
	// resource examples that declare them (kafka_cluster_mirror.dr for
	// most), and what those refer to in turn.
	for added := true; added; {
		added = false
		for _, ref := range resourceRefRE.FindAllStringSubmatch(src, -1) {
			typ, res := ref[2], ref[3]
			if declares("resource", typ, res) {
				continue
			}
			b, err := os.ReadFile(filepath.Join(root, "resources", typ, "resource.tf"))
			if err != nil || !regexp.MustCompile(fmt.Sprintf(`(?m)^resource "%s" "%s"`, typ, res)).Match(b) {
				t.Fatalf("%s refers to resource %s.%s, which neither it nor examples/resources/%s/resource.tf declares", name, typ, res, typ)
			}
			harness.Write(b)
			src += string(b)
			added = true
		}
	}
	writeFile(t, filepath.Join(work, "harness.tf"), []byte(harness.String()))

	agentURL := e.url
	if m := pemFileRE.FindAllStringSubmatch(src, -1); m != nil {
		agentURL = tlsSrv.URL
		for _, f := range m {
			writeFile(t, filepath.Join(work, f[1]), caPEM)
		}
	}
	if regexp.MustCompile(`(?m)^provider "kafka"`).MatchString(src) {
		fmt.Fprintf(&override, "provider \"kafka\" {\n  agent_url = %q\n  token     = %q\n}\n\n", agentURL, accToken)
	}
	srcBootstrap := e.src.Bootstrap()[:1]
	if declares("resource", "kafka_cluster_mirror", "dr") {
		fmt.Fprintf(&override, "resource \"kafka_cluster_mirror\" \"dr\" {\n  source = { bootstrap_servers = [%q] }\n}\n", srcBootstrap[0])
	}
	if override.Len() > 0 {
		writeFile(t, filepath.Join(work, "harness_override.tf"), []byte(override.String()))
	}

	if strings.HasPrefix(name, "data-sources/") {
		// What the data-source examples read.
		if _, err := e.cl.Create(ctx, mirrorapi.MirrorSpec{Name: "dr", Source: mirrorapi.Source{BootstrapServers: srcBootstrap}, Topics: []string{"orders"}}); err != nil {
			t.Fatal(err)
		}
	}

	// The provider runs in this process: its KMIRROR_* fallbacks are ours.
	t.Setenv(EnvAddr, e.url)
	t.Setenv(EnvToken, accToken)
	srcJSON, _ := json.Marshal(srcBootstrap)
	env := append(os.Environ(),
		"TF_REATTACH_PROVIDERS="+reattach,
		"TF_CLI_CONFIG_FILE="+os.DevNull,
		"CHECKPOINT_DISABLE=1",
		"TF_IN_AUTOMATION=1",
		"TF_VAR_agent_url="+e.url,
		"TF_VAR_token="+accToken,
		"TF_VAR_kmirror_token="+accToken,
		"TF_VAR_source_bootstrap="+string(srcJSON),
		"TF_VAR_source_bootstrap_servers="+string(srcJSON),
	)
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(tf, args...)
		cmd.Env, cmd.Dir = env, work
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		start := time.Now()
		err := cmd.Run()
		t.Logf("%s %s: %v in %s", filepath.Base(tf), strings.Join(args, " "), err, time.Since(start).Round(time.Millisecond))
		if err != nil {
			t.Fatalf("%s %s in %s: %v\n%s\nconfiguration added by the test:\n%s\n%s", filepath.Base(tf), args[0], name, err, out.String(), harness.String(), override.String())
		}
		return out.String()
	}
	run("init", "-input=false", "-no-color")
	run("validate", "-no-color")
	run("apply", "-input=false", "-no-color", "-auto-approve")

	// What the state says exists must exist on the agent.
	created := checkExampleState(t, ctx, e.cl, run("show", "-json", "-no-color"))

	// Records arrive and are mirrored, so offsets and lag change: a plan of
	// the unchanged configuration must still be empty (exit 0 with
	// -detailed-exitcode, which CI drift checks use). An output of live
	// figures breaks that.
	ends, err := e.dstAdm.ListEndOffsets(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	end0, _ := ends.Lookup("orders", 0)
	end1, _ := ends.Lookup("orders", 1)
	e.produce(t, "orders", 0, 5)
	if m, err := e.cl.Mirror(ctx, "dr"); err == nil {
		if tp, ok := findTopic(m, "orders"); ok && len(tp.Partitions) == 2 && tp.Partitions[0].State == mirrorapi.StateMirroring {
			e.waitMirrored(t, "dr", "orders", map[int32]int64{0: end0.Offset + 5, 1: end1.Offset})
		}
	}
	run("plan", "-input=false", "-no-color", "-detailed-exitcode")

	// import.sh: each command imports its resource back.
	if b, err := os.ReadFile(filepath.Join(dir, "import.sh")); err == nil {
		cmds := importRE.FindAllStringSubmatch(string(b), -1)
		if len(cmds) == 0 {
			t.Fatalf("%s/import.sh has no line `terraform import ADDRESS ID`", name)
		}
		for _, c := range cmds {
			run("state", "rm", "-no-color", c[1])
			run("import", "-input=false", "-no-color", c[1], c[2])
		}
		checkExampleState(t, ctx, e.cl, run("show", "-json", "-no-color"))
	}

	run("destroy", "-input=false", "-no-color", "-auto-approve")
	for _, m := range created {
		if _, err := e.cl.Mirror(ctx, m); !mirrorapi.IsCode(err, mirrorapi.CodeMirrorNotFound) {
			t.Errorf("mirror %s after destroy: %v, want %s", m, err, mirrorapi.CodeMirrorNotFound)
		}
	}
}

// checkExampleState checks that every kafka_cluster_mirror and
// kafka_mirror_topic in `terraform show -json`'s state exists on the agent,
// and returns the mirrors' names.
func checkExampleState(t *testing.T, ctx context.Context, cl *mirrorapi.Client, showJSON string) []string {
	t.Helper()
	var state struct {
		Values struct {
			RootModule struct {
				Resources []struct {
					Address string         `json:"address"`
					Mode    string         `json:"mode"`
					Type    string         `json:"type"`
					Values  map[string]any `json:"values"`
				} `json:"resources"`
			} `json:"root_module"`
		} `json:"values"`
	}
	if err := json.Unmarshal([]byte(showJSON), &state); err != nil {
		t.Fatalf("terraform show -json: %v\n%s", err, showJSON)
	}
	var mirrors []string
	found := false
	for _, r := range state.Values.RootModule.Resources {
		if r.Mode != "managed" {
			found = found || r.Address == "data.kafka_cluster_mirrors.harness"
			continue
		}
		switch r.Type {
		case "kafka_cluster_mirror":
			name, _ := r.Values["name"].(string)
			if _, err := cl.Mirror(ctx, name); err != nil {
				t.Errorf("%s: mirror %q on the agent: %v", r.Address, name, err)
			}
			mirrors = append(mirrors, name)
		case "kafka_mirror_topic":
			mirror, _ := r.Values["mirror"].(string)
			topic, _ := r.Values["topic"].(string)
			m, err := cl.Mirror(ctx, mirror)
			if _, ok := findTopic(m, topic); err != nil || !ok {
				t.Errorf("%s: topic %s/%s on the agent: %+v (%v)", r.Address, mirror, topic, m, err)
			}
		}
	}
	if !found {
		t.Errorf("the state has no data.kafka_cluster_mirrors.harness: the provider was not used")
	}
	return mirrors
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
