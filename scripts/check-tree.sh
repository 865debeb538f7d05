#!/bin/sh
# check-tree.sh [ROOT]: fails (exit 1, listing file:line: text) when the tree
# carries development-process talk or names files outside the repository.
# Registered as the CTest test tree.hygiene (label hygiene).
#
# Rules, over every text file git knows (tracked, or untracked and not
# ignored; without git: every file under ROOT but .git, build and out):
#   1. issue numbers: /issue[ -]?#?[0-9]+/, case-insensitive, anywhere.
#   2. review talk: "found in review", "a review found", "reviews found".
#   3. session talk: "this session", "previous session", "earlier session(s)",
#      "next session", in Markdown and JSON only. In code "this session" is
#      recur's own API object (error messages such as "this session needs N
#      bytes"), so code is not checked for it.
#   4. absolute machine paths: /work/, /home/, /root/ anywhere; /tmp/ in
#      Markdown and JSON only (tests and scripts make temporary files under
#      /tmp, which is legitimate). System paths such as /usr/bin/python3 or
#      /usr/share/... are not machine paths and pass.
#   5. documents outside the repository: "../shared", "shared/docs/",
#      "DESIGN.md" (the design is docs/design.md).
# And rules 1-5 (all of them) on the "__metadata__" header of every
# .safetensors file, which recur-convert carries into model files; the
# `notes` of models/configs/*.json and models/zoo/*/config.json are JSON text
# and fall under rules 1-5 above.
# This script is exempt (it spells the patterns out).
set -u
set -f  # no globbing: patterns such as '*.md' pass through as they are
root=${1:-$(dirname "$0")/..}
cd "$root" || exit 2
self=scripts/check-tree.sh

issue='[Ii][Ss][Ss][Uu][Ee][ -]?#?[0-9]+'
review='[Ff]ound in review|[Aa] review found|[Rr]eviews found'
session='([Tt]his|[Pp]revious|[Ee]arlier|[Nn]ext) sessions?'
abs_any='(^|[^A-Za-z0-9_.~/-])/(work|home|root)/'
abs_doc='(^|[^A-Za-z0-9_.~/-])/tmp/'
outside='\.\./shared|shared/docs/|DESIGN\.md'

if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  search() {  # search REGEX [PATHSPEC...]: file:line:text of matches
    re=$1; shift
    git grep --untracked -I -n -E -e "$re" -- "${@:-.}" ":!$self"
  }
  safetensors=$(git ls-files --cached --others --exclude-standard -- '*.safetensors')
else
  search() {
    re=$1; shift
    if [ $# -eq 0 ]; then set -- .; fi
    inc=""
    for p in "$@"; do case $p in \*.*) inc="$inc --include=$p";; esac; done
    if [ -n "$inc" ]; then set -- .; fi
    # shellcheck disable=SC2086
    grep -rnIE $inc --exclude-dir=.git --exclude-dir=build --exclude-dir=out -e "$re" "$@" |
      sed 's#^\./##' | grep -v "^$self:"
  }
  safetensors=$(find . -name '*.safetensors' -not -path './build/*' -not -path './out/*' |
                sed 's#^\./##')
fi

found=0
report() {  # report RULE < matches
  while IFS= read -r line; do
    echo "$line    [$1]"
    found=1
  done
}
tmp=$(mktemp) || exit 2
trap 'rm -f "$tmp"' EXIT
run() {  # run RULE REGEX [PATHSPEC...]
  rule=$1; shift
  search "$@" >"$tmp"
  report "$rule" <"$tmp"
}

run "issue number" "$issue"
run "review talk" "$review"
run "session talk" "$session" '*.md' '*.json'
run "absolute machine path" "$abs_any"
run "absolute machine path" "$abs_doc" '*.md' '*.json'
run "document outside the repository" "$outside"

# Safetensors metadata: an 8-byte little-endian header length, then JSON.
for f in $safetensors; do
  n=$(od -An -t u8 -N 8 "$f" | tr -d ' ')
  case $n in ''|*[!0-9]*) echo "$f: not a safetensors file    [metadata]"; found=1; continue;; esac
  meta=$(tail -c +9 "$f" | head -c "$n" | grep -o '"__metadata__": *{[^}]*}')
  [ -n "$meta" ] || continue
  printf '%s\n' "$meta" |
    grep -nE -e "$issue" -e "$review" -e "$session" -e "$abs_any" -e "$abs_doc" -e "$outside" |
    sed "s#^#$f (__metadata__):#" >"$tmp"
  report "safetensors metadata" <"$tmp"
done

if [ "$found" -ne 0 ]; then
  echo "check-tree: the lines above carry issue numbers, review or session talk, machine"
  echo "paths or references outside the repository (rules at the top of $self)"
  exit 1
fi
echo "check-tree: clean"
