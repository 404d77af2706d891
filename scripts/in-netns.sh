#!/usr/bin/env bash
# Run a command inside a fresh network namespace that has only loopback, so nothing the crawler,
# its tests or the servers they start do can reach any address off this machine.
# Falls back to running the command as is (with a loud warning) where namespaces are not allowed,
# e.g. as a non-root developer; CI runs as root and always gets the namespace.
set -euo pipefail
if [ "${CRAWLER_IN_NETNS:-}" = "1" ]; then
  exec "$@"   # already inside
fi
if unshare -n true 2>/dev/null; then
  export CRAWLER_IN_NETNS=1
  exec unshare -n -- bash -c 'ip link set lo up && exec "$@"' bash "$@"
fi
echo "WARNING: cannot create a network namespace (need root or user namespaces);" \
     "running without the loopback-only safety net" >&2
exec "$@"
