package secrets

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, name, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestResolve(t *testing.T) {
	t.Setenv("KMIRROR_TEST_SECRET", "from-env")
	props := writeFile(t, "creds.properties", "# comment\n! also a comment\nuser = alice\npassword=p@ss=word \\\n   continued\nkey\\:with\\ colon: v\nempty=\n", 0o600)
	for _, tc := range []struct {
		in, want, err string
	}{
		{in: "plain literal", want: "plain literal"},
		{in: "${env:KMIRROR_TEST_SECRET}", want: "from-env"},
		{in: "${env:KMIRROR_TEST_UNSET}", err: "KMIRROR_TEST_UNSET is not set"},
		{in: "${file:" + props + ":password}", want: "p@ss=word continued"},
		{in: "${file:" + props + ":user}", want: "alice"},
		{in: "${file:" + props + ":key:with colon}", want: "v"}, // the path ends at the first colon, as in Kafka
		{in: "${file:" + props + ":empty}", want: ""},
		{in: "${file:" + props + ":missing}", err: `has no key "missing"`},
		{in: "${file:/nonexistent/creds:password}", err: "no such file"},
	} {
		got, err := Resolve(tc.in, nil)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("Resolve(%q) = %q, %v; want error %q", tc.in, got, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("Resolve(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestCheckReference(t *testing.T) {
	for in, ok := range map[string]bool{
		"${env:A}": true, "${env:A_1}": true, "${file:/a/b.properties:k}": true, "literal": true, "$literal": true,
		"${env:}": false, "${env:1A}": false, "${vault:x}": false, "${file:/a}": false, "${env:A": false,
	} {
		if got := CheckReference(in) == nil; got != ok {
			t.Errorf("CheckReference(%q) ok = %v, want %v", in, got, ok)
		}
	}
}

func TestBox(t *testing.T) {
	key := writeFile(t, "key", strings.Repeat("ab", 32)+"\n", 0o600)
	box, err := LoadKeyFile(key)
	if err != nil {
		t.Fatal(err)
	}
	const secret = "hunter2-distinctive"
	a, err := box.Seal(secret)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := box.Seal(secret)
	if !IsSealed(a) || strings.Contains(a, secret) || a == b {
		t.Fatalf("sealed %q, %q: want the prefix, no plaintext, a fresh nonce each time", a, b)
	}
	if got, err := Resolve(a, box); err != nil || got != secret {
		t.Fatalf("opening: %q, %v", got, err)
	}
	if _, err := Resolve(a, nil); err == nil || !strings.Contains(err.Error(), "secret_key_file") {
		t.Errorf("opening without a key: %v", err)
	}
	other, _ := NewBox([]byte(strings.Repeat("k", KeySize)))
	if _, err := other.Open(a); err == nil || strings.Contains(err.Error(), secret) {
		t.Errorf("opening with another key: %v", err)
	}
	tampered := a[:len(a)-4] + "AAA="
	if _, err := box.Open(tampered); err == nil {
		t.Error("a tampered value opens")
	}

	for name, tc := range map[string]struct {
		content string
		mode    os.FileMode
		err     string
	}{
		"short":          {"abcd", 0o600, "64 hex digits"},
		"world readable": {strings.Repeat("ab", 32), 0o644, "chmod 600"},
		"base64":         {"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\n", 0o600, ""},
		"raw 32 bytes":   {strings.Repeat("\x01", 32), 0o600, ""},
	} {
		_, err := LoadKeyFile(writeFile(t, "k", tc.content, tc.mode))
		if (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: %v, want %q", name, err, tc.err)
		}
	}
}
