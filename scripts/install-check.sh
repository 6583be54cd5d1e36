#!/usr/bin/env bash
# Checks a `make install` into PREFIX ($1) as a user would meet it: the
# binary found on the PATH, its version naming the storage formats, the man
# page rendering, the zsh and fish scripts naming the command, and bash
# completing `subagents ve` to `verify`. Prints one line per check; exits 1
# at the first failure.
set -euo pipefail
prefix=$1
fail() { echo "install-check: $*" >&2; exit 1; }

[ "$(command -v subagents)" = "$prefix/bin/subagents" ] || fail "subagents on the PATH is $(command -v subagents || echo nothing), not $prefix/bin/subagents"
subagents --version | grep -q '^subagents [0-9]' || fail "--version names no version"
subagents --version | grep -q 'log directory format [0-9]' || fail "--version names no log format"
subagents --version | grep -q 'event schema [0-9]' || fail "--version names no event schema"
echo "install-check: $(subagents --version | head -1) on the PATH"

man_page=$prefix/share/man/man1/subagents.1
rendered=$(MANWIDTH=80 man -l "$man_page" 2>&1) || fail "man -l $man_page failed: $rendered"
for section in NAME SYNOPSIS SUBCOMMANDS "STORAGE FORMATS"; do
  grep -q "^$section" <<<"$rendered" || fail "the man page has no $section section"
done
grep -q 'verify' <<<"$rendered" || fail "the man page does not list verify"
echo "install-check: the man page renders ($(wc -l <<<"$rendered") lines)"

head -1 "$prefix/share/zsh/site-functions/_subagents" | grep -q '^#compdef subagents' || fail "zsh script is not a #compdef for subagents"
grep -q 'complete -c subagents' "$prefix/share/fish/vendor_completions.d/subagents.fish" || fail "fish script completes nothing for subagents"
bash_script=$prefix/share/bash-completion/completions/subagents
bash -n "$bash_script" || fail "the bash script does not parse"
completed=$(bash -c 'source "$1"; COMP_WORDS=(subagents ve); COMP_CWORD=1; _subagents subagents ve subagents; printf "%s\n" "${COMPREPLY[@]}"' _ "$bash_script")
[ "$completed" = "verify" ] || fail "bash completes 'subagents ve' to '$completed', not 'verify'"
completed=$(bash -c 'source "$1"; COMP_WORDS=(subagents completions ""); COMP_CWORD=2; _subagents subagents "" completions; printf "%s\n" "${COMPREPLY[@]}"' _ "$bash_script" | grep -v "^-" | sort | tr '\n' ' ')
[ "$completed" = "bash fish zsh " ] || fail "bash completes 'subagents completions ' to '$completed'"
echo "install-check: bash completes 'subagents ve' to verify and the shells of 'completions'"
