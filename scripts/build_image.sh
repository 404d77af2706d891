#!/usr/bin/env bash
# Build the crawler's image (docker/Dockerfile) with buildah, on a machine without a Docker daemon.
#   scripts/build_image.sh                 # FROM debian:bookworm-slim, pulled from the registry
#   scripts/build_image.sh --local-base    # FROM a bookworm rootfs made here by mmdebstrap from
#                                          # deb.debian.org (no container registry reachable)
#   scripts/build_image.sh --smoke         # then run scripts/image_smoke.sh inside it with podman,
#                                          # no network (PODMAN_RUNTIME=runc where crun cannot start
#                                          # containers, as on a host with hybrid cgroups)
# Env: TAG (default localhost/flink-crawler:<version of pyproject.toml>), BUILDAH_ISOLATION (default chroot:
# RUN steps in a chroot, no OCI runtime, so no cgroups or user namespaces needed), CA_BUNDLE (a CA bundle
# for pip and curl in the build, when a TLS-inspecting proxy stands between the build and PyPI or Maven
# Central: mounted into the RUN steps only, never into the image). Needs root, buildah and,
# for --local-base, mmdebstrap (apt-get install buildah mmdebstrap). See
# docs/decisions/3821-container-image-build-here.md.
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -n1)
TAG=${TAG:-localhost/flink-crawler:${version}}
BASE_TAG=${BASE_TAG:-localhost/bookworm-base:latest}
local_base=false
smoke=false
for arg in "$@"; do
    case "${arg}" in
        --local-base) local_base=true ;;
        --smoke) smoke=true ;;
        *) echo "usage: $0 [--local-base] [--smoke]" >&2; exit 2 ;;
    esac
done

# The rootless defaults (1048576 open files and processes) need CAP_SYS_RESOURCE, which a container or VM
# may not give root: keep within the limits this shell has.
limits=(--ulimit "nofile=$(ulimit -Hn):$(ulimit -Hn)" --ulimit "nproc=4096:4096")

if $local_base; then
    if ! buildah inspect --type image "${BASE_TAG}" >/dev/null 2>&1; then
        start=$SECONDS
        tmp=$(mktemp -d)
        trap 'rm -rf "${tmp}"' EXIT
        # Like debian:bookworm-slim: minbase, no recommends, no docs or man pages, empty apt lists.
        mmdebstrap --variant=minbase --mode=root \
            --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
            --dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-exclude=/usr/share/locale/*' \
            --dpkgopt='path-exclude=/usr/share/info/*' --aptopt='APT::Install-Recommends "false"' \
            --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
            bookworm "${tmp}/rootfs.tar" \
            "deb http://deb.debian.org/debian bookworm main" \
            "deb http://deb.debian.org/debian bookworm-updates main" \
            "deb http://deb.debian.org/debian-security bookworm-security main"
        ctr=$(buildah from scratch)
        buildah add "${ctr}" "${tmp}/rootfs.tar" /
        buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd bash "${ctr}"
        buildah commit --rm "${ctr}" "${BASE_TAG}"
        echo "base ${BASE_TAG} built in $((SECONDS - start)) s"
    fi
    base_args=(--build-arg "BASE_IMAGE=${BASE_TAG}")
else
    base_args=()
fi

ca_args=()
if [[ -n "${CA_BUNDLE:-}" ]]; then
    ca_args=(--volume "$(readlink -f "${CA_BUNDLE}"):/run/build-ca-bundle.crt:ro"
             --build-arg EXTRA_CA_BUNDLE=/run/build-ca-bundle.crt)
fi

start=$SECONDS
buildah build --isolation "${BUILDAH_ISOLATION:-chroot}" --layers "${limits[@]}" "${base_args[@]}" "${ca_args[@]}" \
    -f docker/Dockerfile -t "${TAG}" .
echo "image ${TAG} built in $((SECONDS - start)) s"
buildah images "${TAG}"

if $smoke; then
    start=$SECONDS
    podman ${PODMAN_RUNTIME:+--runtime "${PODMAN_RUNTIME}"} run --rm --network none "${limits[@]}" \
        -v "${PWD}/scripts/image_smoke.sh:/smoke.sh:ro" "${TAG}" bash /smoke.sh
    echo "smoke test passed in $((SECONDS - start)) s"
fi
