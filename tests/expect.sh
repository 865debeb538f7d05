#!/usr/bin/env bash
# expect.sh fails|succeeds REGEX COMMAND [ARGS...]: runs COMMAND, prints its
# output (stdout and stderr), and passes when
#   fails     it exits with a failure status (1..127: an error, not a crash by
#             a signal) and a line of its output matches the extended REGEX
#             (the message that names the problem);
#   succeeds  it exits with status 0 and its whole output matches REGEX (`.`
#             also matches a newline; ^ and $ anchor at the start and end of
#             the output). CTest's PASS_REGULAR_EXPRESSION alone would pass a
#             command that printed the text and then failed or crashed.
set -u
mode=$1
regex=$2
shift 2
output=$("$@" 2>&1)
rc=$?
printf '%s\n' "$output"
if [ "$rc" -ge 128 ]; then
  echo "expect: killed by signal $((rc - 128)) (a crash)"
  exit 1
fi
case "$mode" in
  fails)
    if [ "$rc" -eq 0 ]; then
      echo "expect: exit status 0, expected a failure"
      exit 1
    fi
    grep_args=(-Eq) ;;
  succeeds)
    if [ "$rc" -ne 0 ]; then
      echo "expect: exit status $rc, expected 0"
      exit 1
    fi
    grep_args=(-Ezq) ;;
  *)
    echo "expect: mode must be fails or succeeds, got '$mode'"
    exit 2 ;;
esac
if ! printf '%s\n' "$output" | grep "${grep_args[@]}" -- "$regex"; then
  echo "expect: output does not match /$regex/"
  exit 1
fi
echo "expect: exit status $rc with the expected output"
