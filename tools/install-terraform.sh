#!/usr/bin/env bash
# Uses terraform from PATH when present; otherwise builds v1.8.5 from the Go
# module proxy once into the user cache directory. Prints the path.
set -euo pipefail
if command -v terraform >/dev/null 2>&1; then command -v terraform; exit 0; fi
version="${TERRAFORM_VERSION:-1.8.5}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/kmirror/bin"
bin="$cache/terraform-$version"
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi
mkdir -p "$cache"
echo "building Terraform $version from the Go module proxy (about 5 minutes, once)..." >&2
GOBIN="$cache/gobin.$$" go install "github.com/hashicorp/terraform@v$version"
mv "$cache/gobin.$$/terraform" "$bin"; rmdir "$cache/gobin.$$"
echo "$bin"
