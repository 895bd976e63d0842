#!/usr/bin/env bash
# Install, on this host, the Debian toolchains of the sandbox languages that are missing
# (`make toolchains` runs it; `rewardbus doctor` then lists every language ready). The
# package names are infra/docker/languages.sh's, the worker image's own list: this only
# decides which languages lack their toolchain here. Needs root for apt; without it,
# prints what is missing and fails.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
missing=()
need() { # need LANGUAGE CHECK...: the language is missing when the check fails
  local language=$1; shift
  "$@" >/dev/null 2>&1 || missing+=("$language")
}
need c command -v gcc
need cpp command -v g++
need sql command -v sqlite3
need javascript command -v node
need java command -v javac
need go command -v go
need rust command -v rustc
need perl perl -MTest::Deep -e 1
need php command -v php
need ruby command -v ruby
need lua command -v lua5.4
need r command -v Rscript
need racket command -v racket
need d command -v ldc2
need csharp command -v mcs
need haskell command -v ghc
need ocaml command -v ocamlopt
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "host-languages: missing toolchains for: ${missing[*]}; as root: infra/docker/languages.sh ${missing[*]}" >&2
  exit 1
fi
echo "host-languages: installing the toolchains of: ${missing[*]}" >&2
KEEP_APT_LISTS=1 "$here/../docker/languages.sh" "${missing[@]}"
