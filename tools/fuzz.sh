#!/usr/bin/env bash
# Runs each Go fuzz target in the module for the given -fuzztime (default
# 20000x, a count of executions, about 5 s here). A count, not a duration:
# with a duration, Go before 1.27 can fail a target that found nothing with
# "context deadline exceeded" when the deadline catches a worker mid-run
# (golang/go#75804; it failed `make test` once on go1.26.8).
set -euo pipefail
t="${1:-20000x}"
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
