// Package rdkafka runs the operations of package clientop with librdkafka,
// through confluent-kafka for Python: a client that shares no code with
// franz-go, nor with the Java client (package javaclient).
//
// The client is one Python script, kmirror_client.py, embedded here and run
// with the python of a virtualenv that tools/install-rdkafka.sh creates once
// per machine in the user cache directory, with confluent-kafka (whose wheel
// bundles librdkafka) pinned from PyPI.
package rdkafka

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"

	"github.com/kmirror/kmirror/internal/clientop"
)

//go:embed kmirror_client.py
var script []byte

// Client runs the librdkafka client. The zero Client uses the virtualenv of
// tools/install-rdkafka.sh.
type Client struct {
	// Python is a python with confluent_kafka importable; "" is the one
	// tools/install-rdkafka.sh prints (creating its virtualenv if missing).
	Python string
}

// Run runs op with the zero Client.
func Run(ctx context.Context, op clientop.Op) (clientop.Result, error) {
	return Client{}.Run(ctx, op)
}

// Run runs op with c's librdkafka client and returns what it printed.
// Errors carry the tail of the client's stderr.
func (c Client) Run(ctx context.Context, op clientop.Op) (clientop.Result, error) {
	py, err := c.python(ctx)
	if err != nil {
		return clientop.Result{}, err
	}
	path, err := scriptPath()
	if err != nil {
		return clientop.Result{}, err
	}
	cmd := exec.CommandContext(ctx, py, append([]string{"-u", path}, op.Args()...)...)
	return clientop.Exec(ctx, "rdkafka", op, cmd)
}

var (
	pythonMu  sync.Mutex
	pythonDef string
)

func (c Client) python(ctx context.Context) (string, error) {
	if c.Python != "" {
		return c.Python, nil
	}
	pythonMu.Lock()
	defer pythonMu.Unlock()
	if pythonDef != "" {
		return pythonDef, nil
	}
	py, err := clientop.RunTool(ctx, "install-rdkafka.sh")
	if err != nil {
		return "", fmt.Errorf("rdkafka: installing confluent-kafka: %w", err)
	}
	pythonDef = py
	return py, nil
}

var (
	scriptOnce sync.Once
	scriptFile string
	scriptErr  error
)

// scriptPath writes the embedded script, once, into the user cache
// directory under a name keyed by its hash, and returns its path.
func scriptPath() (string, error) {
	scriptOnce.Do(func() {
		sum := sha256.Sum256(script)
		cache, err := os.UserCacheDir()
		if err != nil {
			scriptErr = fmt.Errorf("rdkafka: %w", err)
			return
		}
		dir := filepath.Join(cache, "kmirror", "rdkafka", "script")
		p := filepath.Join(dir, "kmirror_client-"+hex.EncodeToString(sum[:8])+".py")
		if b, err := os.ReadFile(p); err == nil && sha256.Sum256(b) == sum {
			scriptFile = p
			return
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			scriptErr = fmt.Errorf("rdkafka: %w", err)
			return
		}
		// Write and rename, so that a concurrent reader never sees half a
		// script.
		f, err := os.CreateTemp(dir, ".kmirror_client-*.py")
		if err != nil {
			scriptErr = fmt.Errorf("rdkafka: %w", err)
			return
		}
		_, werr := f.Write(script)
		cerr := f.Close()
		if werr == nil {
			werr = cerr
		}
		if werr == nil {
			werr = os.Rename(f.Name(), p)
		}
		if werr != nil {
			os.Remove(f.Name())
			scriptErr = fmt.Errorf("rdkafka: writing the client script: %w", werr)
			return
		}
		scriptFile = p
	})
	return scriptFile, scriptErr
}
