#!/usr/bin/env bash
# Build the rewardbus images on a local Docker engine, with no registry:
#
#   rewardbus-base:bookworm   `debootstrap --variant=minbase bookworm` + `docker import`
#                             (rootfs tarball cached in $REWARDBUS_CACHE/images/)
#   rewardbus-kafka           Apache Kafka from the project's Maven jars, KRaft
#   rewardbus-worker          the sandbox worker and its language toolchains
#   rewardbus-aggregator      the stream aggregator
#
# Each image is tagged with a hash of everything it is built from (Dockerfile, build
# context, build arguments, base image id) and retagged :latest (the worker also by its
# languages, e.g. rewardbus-worker:python-bash-perl-sql); an image whose hash tag
# exists is not rebuilt. With a registry, build the Dockerfiles directly: they
# default to BASE_IMAGE=debian:bookworm-slim.
#
#   WORKER_LANGUAGES  the worker's toolchains (default: all twenty-two; `make test` builds
#                     "python bash perl sql", see TEST_WORKER_LANGUAGES in the Makefile)
#   BASE_IMAGE        use this base instead of the debootstrap one
#   IMAGES            which images to build (default: "kafka worker aggregator")
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cache=${REWARDBUS_CACHE:-$HOME/.cache/rewardbus}
images_dir=$cache/images
kafka_lib=${REWARDBUS_KAFKA_LIB:-$cache/kafka-4.1.1/lib}
python=${PYTHON:-$repo/.venv/bin/python}
# Default: every language the worker judges, what a deployment wants. They make a
# 3.9 GB image: ~13 min to build and minutes per container start on a vfs engine under
# load (docs/containers.md), so the test images carry the cheap four only.
languages=${WORKER_LANGUAGES:-python c cpp bash perl sql javascript java go rust typescript php ruby lua r racket d csharp kotlin scala haskell ocaml}
mkdir -p "$images_dir"

log() { echo "images: $*" >&2; }

build_base() {
  local tarball=$images_dir/debian-bookworm-minbase.tar
  if [ ! -s "$tarball" ]; then
    command -v debootstrap >/dev/null || { log "error: debootstrap not installed (apt-get install debootstrap)"; exit 1; }
    local root
    root=$(mktemp -d "$images_dir/rootfs.XXXXXX")
    chmod 755 "$root" # mktemp's 0700 would become the image's /: no other uid could run anything
    local t0=$SECONDS
    debootstrap --variant=minbase bookworm "$root" "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" >"$images_dir/debootstrap.log" 2>&1 \
      || { log "error: debootstrap failed; see $images_dir/debootstrap.log"; rm -rf "$root"; exit 1; }
    # Security updates too: the image is rebuilt from the cache, not re-bootstrapped.
    echo "deb http://deb.debian.org/debian-security bookworm-security main" >>"$root/etc/apt/sources.list"
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    tar -C "$root" --numeric-owner -cf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"
    rm -rf "$root"
    log "debootstrap rootfs in $(( SECONDS - t0 )) s ($tarball)"
  fi
  local tag
  tag=rewardbus-base:bookworm-$(sha256sum "$tarball" | cut -c1-12)
  if ! docker image inspect "$tag" >/dev/null 2>&1; then
    docker import --change 'CMD ["/bin/bash"]' "$tarball" "$tag" >/dev/null
    log "imported $tag"
  fi
  docker tag "$tag" rewardbus-base:bookworm
  echo "$tag"
}

wheels() {
  # The project and its runtime dependencies as wheels, built here with the host's
  # pip (its index and certificates), so no image build needs index access.
  # From a copy of the files git tracks (and untracked ones it does not ignore): built
  # in place, setuptools' build/ of a working copy keeps modules since removed from
  # the sources, and the wheel would ship them.
  local dest=$1 source=$repo
  if git -C "$repo" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    source=$(mktemp -d)
    # (A tracked file deleted in the working copy is left out: --ignore-failed-read.)
    (cd "$repo" && git ls-files -z --cached --others --exclude-standard \
      | tar --null -T - --ignore-failed-read -cf - 2>/dev/null) | tar -xf - -C "$source"
  fi
  "$python" -m pip wheel -q --wheel-dir "$dest" "$source" >&2
  [ "$source" = "$repo" ] || rm -rf "$source"
}

# stage NAME CTX: fill CTX with what that image is built from (its Dockerfile, the
# worker's toolchain script, and payload/: what lands in the image).
stage() {
  local name=$1 ctx=$2
  rm -rf "$ctx"
  mkdir -p "$ctx/infra/docker" "$ctx/payload"
  cp "$repo/infra/docker/$name.Dockerfile" "$ctx/infra/docker/"
  case "$name" in
    kafka)
      [ -f "$kafka_lib/.complete" ] || { log "error: no Kafka jars in $kafka_lib (make kafka-jars)"; exit 1; }
      cp -r "$kafka_lib" "$ctx/payload/lib"
      rm -f "$ctx/payload/lib/.complete"
      # The embedded broker's own log4j2 configuration (package data): one copy for both.
      cp "$repo/rewardbus/runtime/broker/log4j2.properties" "$repo/infra/docker/kafka-entrypoint.sh" "$ctx/payload/"
      ;;
    worker)
      cp "$repo/infra/docker/languages.sh" "$ctx/infra/docker/"
      cp "$repo/infra/docker/worker-entrypoint.sh" "$ctx/payload/"
      wheels "$ctx/payload/wheels"
      # The launcher and layer library, compiled here (the image needs no compiler).
      REWARDBUS_CACHE=$ctx/payload "$python" -m sandbox_workers.jail build >/dev/null
      # The toolchains no Debian package provides (infra/toolchains/fetch.sh), fetched here:
      # the image build has no registry access.
      local fetched=() lang
      for lang in $languages; do
        case "$lang" in typescript|kotlin|scala) fetched+=("$lang") ;; esac
      done
      if [ ${#fetched[@]} -gt 0 ]; then
        "$repo/infra/toolchains/fetch.sh" "$cache/toolchains"
        mkdir -p "$ctx/payload/toolchains"
        # Not the JVM class-data archives (cds/): made for the host's JDK and the jars' times,
        # which the copy changes; the worker builds its own at start-up (languages/jvm.py).
        for lang in "${fetched[@]}"; do
          cp -r "$cache/toolchains/$lang" "$ctx/payload/toolchains/"
          rm -rf "$ctx/payload/toolchains/$lang/cds"
        done
      fi
      ;;
    aggregator) wheels "$ctx/payload/wheels" ;;
  esac
}

context_hash() {
  # Wheels carry build timestamps in their RECORDs; hash the installed-file view instead
  # (names and sizes of wheels plus the repo sources they are built from).
  local ctx=$1; shift
  {
    printf '%s\n' "$@"
    (cd "$ctx" && find . -type f ! -path './payload/wheels/rewardbus-*' ! -path './payload/bin/*' -print0 | sort -z | xargs -0 sha256sum)
    if [ -d "$ctx/payload/wheels" ]; then
      (cd "$repo" && git ls-files -co --exclude-standard -- pyproject.toml README.md schemas kafkaio producers consumers sandbox_workers rewardbus \
        | sort | xargs -d '\n' sha256sum 2>/dev/null || true)
    fi
  } | sha256sum | cut -c1-12
}

build_image() {
  local name=$1 base=$2
  local ctx=$images_dir/context/$name
  local args=(--build-arg "BASE_IMAGE=$base")
  [ "$name" = worker ] && args+=(--build-arg "LANGUAGES=$languages")
  stage "$name" "$ctx"
  local base_id hash tag variant=""
  base_id=$(docker image inspect --format '{{.Id}}' "$base")
  # The worker's tag names its language set too, so that the full worker (make images)
  # and the test one (make test-images) are both kept: switching does not rebuild.
  [ "$name" = worker ] && variant="l$(echo "$languages" | sha256sum | cut -c1-6)-"
  hash=$variant$(context_hash "$ctx" "$base_id" "${args[@]}")
  tag=rewardbus-$name:$hash
  if docker image inspect "$tag" >/dev/null 2>&1; then
    log "$tag is up to date"
  else
    local t0=$SECONDS
    docker build -q -f "$ctx/infra/docker/$name.Dockerfile" "${args[@]}" -t "$tag" "$ctx" >/dev/null
    log "built $tag in $(( SECONDS - t0 )) s ($(docker image inspect --format '{{.Size}}' "$tag" | awk '{printf "%.0f MB", $1/1e6}'))"
  fi
  docker tag "$tag" "rewardbus-$name:latest"
  # And by its language set, which stays when another set takes :latest (the container
  # tests name the worker they start: rewardbus-worker:python-bash-perl-sql).
  [ "$name" = worker ] && docker tag "$tag" "rewardbus-worker:${languages// /-}"
  # Older hash tags of this image (of this language set, or from before the tags named
  # one): on vfs each holds a full copy of its layers.
  docker images --format '{{.Repository}}:{{.Tag}}' "rewardbus-$name" \
    | grep -E ":($variant|[0-9a-f]{12}$)" | grep -v -e ":latest$" -e ":$hash$" \
    | xargs -r docker rmi >/dev/null 2>&1 || true
}

# The worker's seccomp profile (infra/docker/seccomp.py): Docker's default of the
# engine's version, from Debian's golang-github-docker-docker-dev (fetched with
# apt-get download, cached), plus pivot_root and less of the CAP_SYS_ADMIN group.
seccomp_profile() {
  local out=$images_dir/seccomp-worker.json
  local default=/usr/share/gocode/src/github.com/docker/docker/profiles/seccomp/default.json
  if [ ! -f "$default" ]; then
    default=$images_dir/docker-default-seccomp.json
    if [ ! -s "$default" ]; then
      local tmp
      tmp=$(mktemp -d)
      (cd "$tmp" && apt-get download -qq golang-github-docker-docker-dev) \
        || { log "error: apt-get download golang-github-docker-docker-dev failed"; rm -rf "$tmp"; exit 1; }
      dpkg-deb --fsys-tarfile "$tmp"/*.deb \
        | tar -xO ./usr/share/gocode/src/github.com/docker/docker/profiles/seccomp/default.json >"$default.tmp"
      mv "$default.tmp" "$default"
      rm -rf "$tmp"
    fi
  fi
  python3 "$repo/infra/docker/seccomp.py" "$default" "$out"
  log "seccomp profile $out"
}

"$repo/infra/docker/dockerd.sh"
seccomp_profile
base=${BASE_IMAGE:-$(build_base)}
for name in ${IMAGES:-kafka worker aggregator}; do
  build_image "$name" "$base"
done
