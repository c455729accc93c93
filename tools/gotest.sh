#!/usr/bin/env bash
# gotest.sh runs `go test` with the arguments given, its output shown as it
# comes, and when it fails repeats at the end what the failing tests said
# themselves: their own lines (name_test.go:N, t.Log and t.Error alike), the
# FAIL lines and panics. The logs of the brokers and agents a test ran come
# between them and can run to thousands of lines; a CI log shortened in the
# middle would otherwise lose the failure's message.
set -uo pipefail
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"${GO:-go}" test "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then
	echo "== go test failed (exit $rc); what the failing tests said (their own lines, at most 300):"
	grep -E '^[[:space:]]*--- FAIL|^[[:space:]]+[A-Za-z0-9_]+_test\.go:[0-9]+: |^panic: |^FAIL' "$log" | cut -c1-400 | head -n 300
fi
exit "$rc"
