#!/usr/bin/env bash
# expect_output.sh REGEX COMMAND [ARGS...]: passes when COMMAND exits with
# status 0 and its output (stdout and stderr, as one text: `.` also matches a
# newline; ^ and $ anchor at the start and end of the whole output, unlike
# expect_error.sh, which matches line by line) matches the extended REGEX.
# CTest's PASS_REGULAR_EXPRESSION alone would pass a command that printed the
# text and then failed or crashed.
set -u
regex=$1
shift
output=$("$@" 2>&1)
rc=$?
printf '%s\n' "$output"
if [ "$rc" -ne 0 ]; then
  if [ "$rc" -ge 128 ]; then
    echo "expect_output: killed by signal $((rc - 128)) (a crash)"
  else
    echo "expect_output: exit status $rc, expected 0"
  fi
  exit 1
fi
if ! printf '%s' "$output" | grep -Ezq -- "$regex"; then
  echo "expect_output: output does not match /$regex/"
  exit 1
fi
echo "expect_output: exit status 0 with the expected output"
