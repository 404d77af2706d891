#!/usr/bin/env bash
# Smoke test of the crawler's image (docker/Dockerfile), run INSIDE it with no network:
#   podman run --rm --network none -v "$PWD/scripts/image_smoke.sh:/smoke.sh:ro" IMAGE bash /smoke.sh
# (scripts/build_image.sh --smoke does so.) Checks: the CLI and its consumers' commands, the packages
# import, Java 17, Flink's CLI and the scripts Flink's Kubernetes integration runs, the job script at the
# path k8s/base/flink-crawl.yaml names, non-root uid 10000, no compiler; then a small PyFlink job on a local
# MiniCluster in process and thread mode (Python workers, and pemja's interpreter embedded in the JVM).
# SMOKE_PYFLINK=0 skips the job. Exit 0 only when every check passes.
set -uo pipefail

failures=0
check() {  # check NAME COMMAND...: run it, print its output, count a failure
    local name=$1
    shift
    echo "== ${name}: $*"
    if "$@" 2>&1 | sed 's/^/   /'; then echo "   ok"; else echo "   FAILED"; failures=$((failures + 1)); fi
}

check "crawler --version" crawler --version
check "python -m crawler --version" python -m crawler --version
check "imports" python -c "import pyflink, udfs, durable, bus, operators, consumers, jobs.crawl, crawler.cli, synthweb; print('imported')"
check "crawler config" bash -c 'crawler config | head -n 12'
for cmd in corpus index takedown-apply warc-compact warc-index warc-wacz retention api seed; do
    check "crawler ${cmd} --help" bash -c "crawler ${cmd} --help >/dev/null && echo 'help printed'"
done
check "java -version" java -version
check "JAVA_HOME" bash -c 'test -x "${JAVA_HOME}/bin/java" && echo "${JAVA_HOME} -> $(readlink -f "${JAVA_HOME}")"'
check "flink --version" flink --version
check "Flink's Kubernetes entry points on PATH" bash -c \
    'command -v kubernetes-jobmanager.sh kubernetes-taskmanager.sh && test -x /docker-entrypoint.sh'
check "FLINK_HOME layout" bash -c 'ls /opt/flink/lib /opt/flink/plugins/s3-fs-presto /opt/flink/opt && test -w /opt/flink/log'
check "job script at /opt/crawler/jobs/crawl.py" bash -c \
    'python /opt/crawler/jobs/crawl.py --help | head -n 3'
check "flink-conf template in the wheel" python -c "from crawler.paths import FLINK_CONF, JAVA; assert (FLINK_CONF / 'config.yaml').is_file() and len(list(JAVA.glob('*/pom.xml'))) == 4; print(FLINK_CONF)"
check "uid is 10000, not root" bash -c 'echo "uid=$(id -u) gid=$(id -g) user=$(id -un)"; test "$(id -u)" = 10000'
check "working directory writable" bash -c 'echo "$PWD"; touch .smoke && rm .smoke'
check "no compiler" bash -c \
    'for c in gcc g++ cc c++ make ld as; do if command -v "$c"; then exit 1; fi; done; echo "none of gcc g++ cc c++ make ld as"'
check "no -dev or compiler packages" bash -c \
    '! dpkg-query -W -f="\${Package}\n" | grep -E "^(gcc|g\+\+|cpp|make|binutils|libc6-dev|python3\.11-dev)(-[0-9]+)?$" && echo none'
check "libpython for pemja" bash -c 'ls /usr/lib/*/libpython3.11.so.1.0'
# A page rendered in Chromium as the rendering tier renders it (no network: its document is given, its
# one script request answered in process); skipped when the image was built WITH_CHROMIUM=0.
render_smoke() {
    python - <<'PY'
import asyncio
from operators.browser import Browser, Fetched, find_chromium
if find_chromium() is None:
    print("no Chromium in this image (WITH_CHROMIUM=0): render leases fetch their page plainly")
    raise SystemExit(0)
page = Fetched(200, (("Content-Type", "text/html"),), b'<html><body><div id="root"></div><script src="/app.js"></script></body></html>')
script = Fetched(200, (("Content-Type", "text/javascript"),), b'document.getElementById("root").innerHTML = \'<a href="/next">next</a>\';')
async def main():
    async def fetch(url, kind):
        return script if url.endswith("/app.js") else None
    async with Browser() as browser:
        return await browser.render("http://smoke.test/", page, fetch)
result = asyncio.run(main())
print(f"rendered in {result.seconds:.2f} s: {result.dom[:120]}")
assert 'href="/next"' in result.dom, result.dom
PY
}
check "a render in headless Chromium" render_smoke

# A JobManager started the way the operator starts one (the entry point, then `bash -c SCRIPT`), from
# /opt/flink with its conf/ and log/, answering on its REST port.
jobmanager() {
    /docker-entrypoint.sh bash -c "jobmanager.sh start-foreground" >/tmp/jobmanager.out 2>&1 &
    local pid=$! answer=""
    for _ in $(seq 90); do
        answer=$(python -c 'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:8081/config", timeout=2).read().decode())' 2>/dev/null) && break
        sleep 1
    done
    kill "${pid}" 2>/dev/null; wait "${pid}" 2>/dev/null
    echo "${answer}" | head -c 300; echo
    ls /opt/flink/log
    [[ "${answer}" == *flink-version* ]]
}
check "JobManager through /docker-entrypoint.sh bash -c" jobmanager

if [[ "${SMOKE_PYFLINK:-1}" == "1" ]]; then
    job=$(mktemp --suffix=.py)
    cat > "${job}" <<'PY'
import sys
from pyflink.common import Configuration, Types
from pyflink.datastream import StreamExecutionEnvironment

def run(mode: str) -> list[int]:
    conf = Configuration()
    conf.set_string("python.execution-mode", mode)
    conf.set_string("python.executable", sys.executable)
    conf.set_string("rest.bind-address", "127.0.0.1")
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(1)
    from udfs.urls import normalize_url  # the project's code, imported on the workers
    out = env.from_collection([1, 2, 3], type_info=Types.INT()).map(
        lambda x: x * x if normalize_url("HTTPS://Example.org") else -1, output_type=Types.INT())
    with out.execute_and_collect() as results:
        return sorted(results)

for mode in ("process", "thread"):
    got = run(mode)
    print(mode, got)
    assert got == [1, 4, 9], got
PY
    check "PyFlink job on a MiniCluster (process and thread mode)" timeout 300 python "${job}"
    rm -f "${job}"
fi

if ((failures)); then echo "SMOKE FAILED: ${failures} check(s)"; exit 1; fi
echo "SMOKE OK"
