#!/usr/bin/env bash
# Runs each Go fuzz target in the module for the given time (default 5s).
set -euo pipefail
t="${1:-5s}"
found=0
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //'); do
    found=1
    echo "fuzz $pkg $f for $t"
    go test -run '^$' -fuzz "^$f\$" -fuzztime "$t" "$pkg"
  done
done
[ "$found" = 1 ] || echo "no fuzz targets"
