"""Java artifacts from Maven Central, resolved by Maven itself and cached under `.cache/maven/`.

Each set of jars the project needs (the Kafka broker, the Flink Kafka connector, validators used by
tests) is declared as the dependencies of a small `crawler/java/<name>/pom.xml`. Maven resolves the transitive
closure; we copy it into one folder per set and reuse it until the pom changes.
"""
from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

from crawler.paths import CACHE, JAVA


class MavenError(RuntimeError):
    """Maven could not resolve a jar set; the message carries Maven's own output."""


def jar_dir(name: str) -> Path:
    """The folder holding the resolved jars of `crawler/java/<name>/pom.xml`, resolving them on first use."""
    pom = JAVA / name / "pom.xml"
    if not pom.is_file():
        raise MavenError(f"no jar set called {name!r}: {pom} does not exist")
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()[:16]
    out = CACHE / "maven" / name
    stamp = out / ".pom-sha256"
    if stamp.is_file() and stamp.read_text() == digest:
        return out
    if shutil.which("mvn") is None:
        raise MavenError("Maven (`mvn`) is not installed; install it (apt-get install maven) and retry")
    staging = out.with_name(name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    proc = subprocess.run(
        ["mvn", "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
         f"-DoutputDirectory={staging}", "-DincludeScope=runtime"],
        capture_output=True, text=True,
    )
    if proc.returncode != 0:
        raise MavenError(f"mvn failed for {pom}:\n{proc.stdout[-4000:]}{proc.stderr[-4000:]}")
    (staging / ".pom-sha256").write_text(digest)
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    return out


def classpath(name: str) -> str:
    """A Java class path (`a.jar:b.jar:...`) of every jar in the set `name`."""
    return ":".join(str(p) for p in sorted(jar_dir(name).glob("*.jar")))
