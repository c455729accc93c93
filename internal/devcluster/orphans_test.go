package devcluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestSweepOrphans: Start removes the throwaway cluster directories whose
// owner processes have all exited, and no other.
func TestSweepOrphans(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	exited := exec.Command("true")
	if err := exited.Run(); err != nil {
		t.Fatal(err)
	}
	dead, live := strconv.Itoa(exited.Process.Pid), strconv.Itoa(os.Getpid())

	dirs := []struct {
		name   string
		owners *string // nil: no owner file
		kept   bool
	}{
		{"kmirror-kafka-killed-1", kmsg.StringPtr(dead + "\n"), false},
		{"kmirror-kafka-killed-2", kmsg.StringPtr(dead + "\n" + dead + "\n"), false},
		{"kmirror-kafka-running-1", kmsg.StringPtr(live + "\n"), true},
		{"kmirror-kafka-broker-left-1", kmsg.StringPtr(dead + "\n" + live + "\n"), true},
		{"kmirror-kafka-being-made-1", nil, true},
		{"kmirror-kafka-empty-owners-1", kmsg.StringPtr(""), true},
		{"kmirror-kafka-not-ours-1", kmsg.StringPtr("broker-1\n"), true},
		{"kmirror-kafka-group-0", kmsg.StringPtr("0\n"), true},
		{"other-killed-1", kmsg.StringPtr(dead + "\n"), true},
	}
	for _, d := range dirs {
		dir := filepath.Join(tmp, d.name)
		if err := os.MkdirAll(filepath.Join(dir, "broker-1"), 0o755); err != nil {
			t.Fatal(err)
		}
		if d.owners != nil {
			if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(*d.owners), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}

	c, err := Start(Name("sweeper"))
	if err != nil {
		t.Fatal(err)
	}
	c.Close()

	for _, d := range dirs {
		_, err := os.Stat(filepath.Join(tmp, d.name))
		if kept := err == nil; kept != d.kept {
			t.Errorf("%s (owners %s): kept %v, want %v (stat: %v)", d.name, deref(d.owners), kept, d.kept, err)
		}
	}
	// What the sweep keeps stays until its owners are gone.
	removed, err := sweepOrphans()
	if err != nil || len(removed) != 0 {
		t.Errorf("a second sweep removed %v (%v), want nothing", removed, err)
	}
}
