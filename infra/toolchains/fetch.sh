#!/usr/bin/env bash
# Fetch the sandbox toolchains that no Debian package provides (or only a years-old one)
# into $REWARDBUS_CACHE/toolchains (default ~/.cache/rewardbus/toolchains), one directory
# each, where sandbox_workers/languages/ discovers them:
#
#   typescript/  the TypeScript compiler from the npm registry (run by the host's node)
#   kotlin/lib/  the Kotlin compiler and standard library from Maven Central (kotlin.pom.xml)
#   scala/lib/   the Scala 2.13 compiler and library from Maven Central (scala.pom.xml)
#
# A toolchain whose directory is complete (its .complete file names this script's inputs'
# hash) is not fetched again. The worker image copies the directory (infra/docker/images.sh):
# its build has no registry access.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dest=${1:-${REWARDBUS_CACHE:-$HOME/.cache/rewardbus}/toolchains}
TYPESCRIPT_VERSION=5.9.3
mkdir -p "$dest"

log() { echo "toolchains: $*" >&2; }

# done_for NAME STAMP: true when $dest/NAME was completed from the same inputs.
done_for() { [ -f "$dest/$1/.complete" ] && [ "$(cat "$dest/$1/.complete")" = "$2" ]; }

typescript() {
  local stamp="typescript@$TYPESCRIPT_VERSION"
  done_for typescript "$stamp" && return
  command -v npm >/dev/null || { log "error: npm not found: install Node.js 18+ with npm"; exit 1; }
  local tmp
  tmp=$(mktemp -d "$dest/typescript.XXXXXX")
  npm install -s --prefix "$tmp" --no-audit --no-fund --no-save "typescript@$TYPESCRIPT_VERSION" >&2
  echo "$stamp" >"$tmp/.complete"
  rm -rf "$dest/typescript" && mv "$tmp" "$dest/typescript"
  chmod -R a+rX "$dest/typescript"
  log "typescript $TYPESCRIPT_VERSION in $dest/typescript"
}

maven() {
  local name=$1 pom=$here/$1.pom.xml stamp
  stamp=$(sha256sum "$pom" | cut -c1-16)
  done_for "$name" "$stamp" && return
  command -v mvn >/dev/null || { log "error: mvn not found: install Maven (apt-get install maven)"; exit 1; }
  local tmp
  tmp=$(mktemp -d "$dest/$name.XXXXXX")
  mvn -q -B -f "$pom" dependency:copy-dependencies -DoutputDirectory="$tmp/lib" -DincludeScope=runtime >&2
  echo "$stamp" >"$tmp/.complete"
  rm -rf "${dest:?}/$name" && mv "$tmp" "$dest/$name"
  chmod -R a+rX "$dest/$name"
  log "$name compiler in $dest/$name/lib"
}

typescript
maven kotlin
maven scala
