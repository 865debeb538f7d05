#!/bin/sh
# check_test_names.sh DIR: fails if a TEST_CASE name under DIR holds a ';'.
# CTest's doctest discovery splits such a name into two tests whose filters
# match no test case, and both pass without running anything.
if grep -rnE 'TEST_CASE[(]"[^"]*;' "$1"; then
  echo "check_test_names: a TEST_CASE name above holds a ';' (use ',')"
  exit 1
fi
