#!/bin/sh
# Install the Debian toolchains for the sandbox languages named in $@ (the worker
# image's LANGUAGES build argument). bash and perl come with every Debian base
# (bash, perl-base); perl gets Test::Deep, which MultiPL-E's tests use. The jail's launcher needs no
# compiler in the image: images.sh compiles it outside and ships the binaries.
set -eu
pkgs="python3 python3-venv"
for lang in "$@"; do
  case "$lang" in
    python|bash) ;;
    perl) pkgs="$pkgs libtest-deep-perl" ;;  # MultiPL-E's Perl tests use Test::Deep
    c) pkgs="$pkgs gcc libc6-dev" ;;
    cpp) pkgs="$pkgs g++ libc6-dev" ;;
    sql) pkgs="$pkgs sqlite3" ;;
    javascript) pkgs="$pkgs nodejs" ;;
    java) pkgs="$pkgs openjdk-17-jdk-headless" ;;
    go) pkgs="$pkgs golang-go" ;;
    rust) pkgs="$pkgs rustc" ;;
    typescript) pkgs="$pkgs nodejs" ;;  # the compiler: $REWARDBUS_CACHE/toolchains/typescript
    php) pkgs="$pkgs php-cli" ;;
    ruby) pkgs="$pkgs ruby" ;;
    lua) pkgs="$pkgs lua5.4" ;;
    r) pkgs="$pkgs r-base-core" ;;
    racket) pkgs="$pkgs racket" ;;
    d) pkgs="$pkgs ldc" ;;
    csharp) pkgs="$pkgs mono-mcs mono-runtime" ;;
    kotlin|scala) pkgs="$pkgs openjdk-17-jre-headless" ;;  # compilers: .../toolchains/{kotlin,scala}
    haskell) pkgs="$pkgs ghc" ;;
    ocaml) pkgs="$pkgs ocaml-nox" ;;
    *) echo "unknown sandbox language: $lang" >&2; exit 1 ;;
  esac
done
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086 # word splitting of the package list is intended
apt-get install -y -qq --no-install-recommends $pkgs >/dev/null
# An image keeps no package cache; a host (infra/toolchains/host-languages.sh) keeps its own.
if [ "${KEEP_APT_LISTS:-0}" != 1 ]; then
  apt-get clean
  rm -rf /var/lib/apt/lists/*
fi
