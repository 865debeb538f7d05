#!/usr/bin/env bash
# expect_error.sh REGEX COMMAND [ARGS...]: passes when COMMAND exits with a
# failure status (1..127: an error, not a crash by a signal) and its output
# matches the extended REGEX (the message that names the problem).
set -u
regex=$1
shift
output=$("$@" 2>&1)
rc=$?
printf '%s\n' "$output"
if [ "$rc" -eq 0 ]; then
  echo "expect_error: exit status 0, expected a failure"
  exit 1
fi
if [ "$rc" -ge 128 ]; then
  echo "expect_error: killed by signal $((rc - 128)) (a crash)"
  exit 1
fi
if ! printf '%s\n' "$output" | grep -Eq -- "$regex"; then
  echo "expect_error: output does not match /$regex/"
  exit 1
fi
echo "expect_error: exit status $rc with the expected message"
