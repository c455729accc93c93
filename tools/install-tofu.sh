#!/usr/bin/env bash
# Builds OpenTofu from the Go module proxy once and caches the binary in the
# user cache directory, so fresh clones (and CI) reuse it. Prints the path.
set -euo pipefail
version="${TOFU_VERSION:-1.12.6}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/kmirror/bin"
bin="$cache/tofu-$version"
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi
if command -v tofu >/dev/null 2>&1 && tofu version 2>/dev/null | grep -q "v$version"; then
  command -v tofu; exit 0
fi
mkdir -p "$cache"
echo "building OpenTofu $version from the Go module proxy (about 5 minutes, once)..." >&2
dir=$(go mod download -json "github.com/opentofu/opentofu@v$version" | sed -n 's/.*"Dir": "\(.*\)",*/\1/p')
[ -n "$dir" ] || { echo "could not download github.com/opentofu/opentofu@v$version" >&2; exit 1; }
tmp="$bin.tmp.$$"
(cd "$dir" && GOFLAGS=-mod=mod go build -o "$tmp" ./cmd/tofu)
mv "$tmp" "$bin"
echo "$bin"
