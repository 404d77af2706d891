#!/usr/bin/env bash
# The image's entry point (docker/Dockerfile). Flink's Kubernetes integration runs
# `/docker-entrypoint.sh bash -c "kubernetes-jobmanager.sh ..."` (kubernetes.entry.path), a consumer
# Deployment `crawler <command> ...`: both are run as given. Arguments that start with `-` go to
# `crawler` (`docker run IMAGE --version`). The image runs as uid 10000 and never needs to drop privileges.
set -euo pipefail

# jemalloc for the JVM's native allocations (RocksDB), as Flink's own image does; DISABLE_JEMALLOC=true
# turns it off.
if [[ "${DISABLE_JEMALLOC:-false}" != "true" ]]; then
    for lib in /usr/lib/*/libjemalloc.so.2; do
        if [[ -f "${lib}" ]]; then
            export LD_PRELOAD="${lib}${LD_PRELOAD:+:${LD_PRELOAD}}"
            break
        fi
    done
fi

if [[ $# -eq 0 || "$1" == -* ]]; then
    set -- crawler "$@"
fi
exec "$@"
