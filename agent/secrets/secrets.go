// Package secrets handles the secret values of cluster connections (SASL
// passwords and tokens, TLS private keys): references in Kafka's
// config-provider form, resolved when a connection is made, and literal
// values sealed with AES-256-GCM before the state topic keeps them.
//
// A value is one of:
//   - a reference, "${env:NAME}" (environment variable NAME) or
//     "${file:PATH:KEY}" (KEY of the Java properties file PATH, as Kafka's
//     FileConfigProvider reads it). References are not secret: they are
//     stored and shown as written.
//   - a sealed value, "kmirror-sealed:v1:" and base64 of nonce and
//     ciphertext: a literal sealed by a Box. Only a Box with the same key
//     opens it.
//   - a literal, anything else.
//
// Error messages name the reference or the field, never the value.
package secrets

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/kmirror/kmirror/internal/mirrorspec"
)

// SealedPrefix starts every sealed value.
const SealedPrefix = "kmirror-sealed:v1:"

// KeySize is the size of a Box's key: AES-256.
const KeySize = 32

// IsReference says whether v is an ${env:NAME} or ${file:PATH:KEY}
// reference (mirrorspec keeps the grammar, for the provider too).
func IsReference(v string) bool { return mirrorspec.IsReference(v) }

// IsSealed says whether v is a sealed value.
func IsSealed(v string) bool { return strings.HasPrefix(v, SealedPrefix) }

// CheckReference says what is wrong with a value that looks like a
// reference ("${...}") but is not a valid one; nil for anything else.
func CheckReference(v string) error { return mirrorspec.CheckReference(v) }

// Resolve returns the secret that v stands for: the environment variable
// or file entry of a reference, the opened value of a sealed one (box may be
// nil when v is not sealed), v itself for a literal.
func Resolve(v string, box *Box) (string, error) {
	switch kind, name, key, _ := mirrorspec.ParseReference(v); kind {
	case "env":
		s, ok := os.LookupEnv(name)
		if !ok {
			return "", fmt.Errorf("%s: the environment variable %s is not set in the agent's environment", v, name)
		}
		return s, nil
	case "file":
		return fileValue(v, name, key)
	}
	if IsSealed(v) {
		if box == nil {
			return "", errors.New("a sealed secret cannot be opened: the agent has no secret key; start it with the secret_key_file it was sealed with")
		}
		return box.Open(v)
	}
	return v, nil
}

// fileValue reads key from the properties file path (FileConfigProvider's
// format: key=value or key: value, # and ! comments, \ continuations).
func fileValue(ref, path, key string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s: reading the properties file: %w", ref, err)
	}
	props := parseProperties(b)
	v, ok := props[key]
	if !ok {
		return "", fmt.Errorf("%s: the properties file %s has no key %q", ref, path, key)
	}
	return v, nil
}

// parseProperties reads a Java properties file, enough of the format for
// secrets: separators '=', ':' or whitespace, comment lines, line
// continuations, the common escapes.
func parseProperties(b []byte) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var logical strings.Builder
	for sc.Scan() {
		line := strings.TrimLeft(sc.Text(), " \t\f")
		if logical.Len() == 0 && (line == "" || line[0] == '#' || line[0] == '!') {
			continue
		}
		// An odd number of trailing backslashes continues the line.
		n := len(line) - len(strings.TrimRight(line, `\`))
		if n%2 == 1 {
			logical.WriteString(line[:len(line)-1])
			continue
		}
		logical.WriteString(line)
		k, v := splitProperty(logical.String())
		out[k] = v
		logical.Reset()
	}
	if logical.Len() > 0 {
		k, v := splitProperty(logical.String())
		out[k] = v
	}
	return out
}

func splitProperty(s string) (string, string) {
	var key strings.Builder
	i := 0
	for ; i < len(s); i++ {
		c := s[i]
		if c == '\\' && i+1 < len(s) {
			i++
			key.WriteByte(unescape(s[i]))
			continue
		}
		if c == '=' || c == ':' || c == ' ' || c == '\t' || c == '\f' {
			break
		}
		key.WriteByte(c)
	}
	rest := strings.TrimLeft(s[i:], " \t\f")
	if rest != "" && (rest[0] == '=' || rest[0] == ':') {
		rest = strings.TrimLeft(rest[1:], " \t\f")
	}
	var val strings.Builder
	for j := 0; j < len(rest); j++ {
		if rest[j] == '\\' && j+1 < len(rest) {
			j++
			val.WriteByte(unescape(rest[j]))
			continue
		}
		val.WriteByte(rest[j])
	}
	return key.String(), val.String()
}

func unescape(c byte) byte {
	switch c {
	case 't':
		return '\t'
	case 'n':
		return '\n'
	case 'r':
		return '\r'
	case 'f':
		return '\f'
	}
	return c
}

// Box seals and opens literal secrets with AES-256-GCM.
type Box struct {
	aead cipher.AEAD
}

// additionalData binds sealed values to their use, so that a ciphertext
// made for something else with the same key does not open as a secret.
var additionalData = []byte("kmirror secret v1")

// NewBox returns a box with a KeySize-byte key.
func NewBox(key []byte) (*Box, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("the secret key has %d bytes; it needs %d", len(key), KeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Box{aead: aead}, nil
}

// LoadKeyFile reads a Box's key from path: 32 bytes written as 64 hex
// digits or as base64 (`openssl rand -hex 32 > key`), or the 32 raw bytes.
func LoadKeyFile(path string) (*Box, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the secret key file: %w", err)
	}
	if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
		// Like ssh, refuse a key others can read.
		return nil, fmt.Errorf("secret key file %s is readable by others (mode %04o): chmod 600 %s", path, st.Mode().Perm(), path)
	}
	key, err := decodeKey(b)
	if err != nil {
		return nil, fmt.Errorf("secret key file %s: %w", path, err)
	}
	return NewBox(key)
}

func decodeKey(b []byte) ([]byte, error) {
	if len(b) == KeySize {
		return b, nil
	}
	s := strings.TrimSpace(string(b))
	if k, err := hex.DecodeString(s); err == nil && len(k) == KeySize {
		return k, nil
	}
	if k, err := base64.StdEncoding.DecodeString(s); err == nil && len(k) == KeySize {
		return k, nil
	}
	return nil, fmt.Errorf("expected %d bytes as 64 hex digits or base64; make one with `openssl rand -hex 32`", KeySize)
}

// Seal returns the sealed form of a literal secret.
func (b *Box) Seal(plain string) (string, error) {
	nonce := make([]byte, b.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("sealing a secret: %w", err)
	}
	ct := b.aead.Seal(nonce, nonce, []byte(plain), additionalData)
	return SealedPrefix + base64.StdEncoding.EncodeToString(ct), nil
}

// Open returns the secret of a sealed value.
func (b *Box) Open(sealed string) (string, error) {
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(sealed, SealedPrefix))
	if err != nil || !IsSealed(sealed) || len(raw) < b.aead.NonceSize() {
		return "", errors.New("a sealed secret is malformed")
	}
	n := b.aead.NonceSize()
	plain, err := b.aead.Open(nil, raw[:n], raw[n:], additionalData)
	if err != nil {
		return "", errors.New("a sealed secret does not open with the agent's secret key: start the agent with the secret_key_file it was sealed with, or give the secret again")
	}
	return string(plain), nil
}
