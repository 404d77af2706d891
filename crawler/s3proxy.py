"""An S3-compatible object store on loopback: S3Proxy with its filesystem backend, for the integration
tests and the local stack: `S3ProxyServer(data_dir, port).start()` / `.stop()`.

The jars come from Maven Central through `crawler/java/s3proxy/pom.xml`; everything the server writes (its
properties, the buckets as folders under `data_dir/blobs`, its log, the pid file) lives under
`data_dir`. Requests are signed (AWS v2 or v4) with `identity`/`credential`, like a real store.
"""
from __future__ import annotations

import shutil
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

from crawler import maven
from crawler.daemon import Daemon

DEFAULT_IDENTITY = "crawler"
DEFAULT_CREDENTIAL = "crawler-secret"


class S3ProxyError(RuntimeError):
    """The server could not be started or reached; the message points at its log."""


class S3ProxyServer:
    """One S3Proxy JVM owned through a pid file under `data_dir`; start/stop are idempotent."""

    def __init__(self, data_dir: Path, port: int = 9000, *, identity: str = DEFAULT_IDENTITY,
                 credential: str = DEFAULT_CREDENTIAL, heap: str = "256m") -> None:
        if not identity or not credential:
            raise ValueError("identity and credential must both be non-empty")
        self.data_dir = Path(data_dir).resolve()
        self.port = port
        self.identity = identity
        self.credential = credential
        self.heap = heap
        self.blob_dir = self.data_dir / "blobs"
        self.config_file = self.data_dir / "s3proxy.properties"
        self.daemon = Daemon(
            name="s3proxy",
            pid_file=self.data_dir / "s3proxy.pid",
            log_file=self.data_dir / "logs" / "s3proxy.out",
        )

    @property
    def endpoint_url(self) -> str:
        """The URL S3 clients are pointed at (path-style addressing)."""
        return f"http://127.0.0.1:{self.port}"

    def pid(self) -> int | None:
        """The server's pid if it runs (and is the one we started), else None."""
        return self.daemon.pid()

    def start(self, timeout_s: float = 60.0) -> None:
        """Write the properties, start the JVM and wait until it answers HTTP. Does nothing if it runs."""
        if self.pid() is None:
            if _port_in_use(self.port):
                raise S3ProxyError(f"port {self.port} is already taken by another process")
            java = shutil.which("java")
            if java is None:
                raise S3ProxyError("`java` (17+) is not on PATH")
            self._write_config()
            self.daemon.spawn(
                [java, f"-Xmx{self.heap}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                 "-Djava.awt.headless=true", f"-Dlogback.configurationFile={self._write_logback()}",
                 "-cp", maven.classpath("s3proxy"), "org.gaul.s3proxy.Main", "--properties", str(self.config_file)],
                cwd=self.data_dir)
        self._wait_ready(timeout_s)

    def stop(self, timeout_s: float = 30.0) -> bool:
        """SIGTERM the server we started (SIGKILL after `timeout_s`); True if one was running."""
        return self.daemon.stop(timeout_s)

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.pid() is None:
                raise S3ProxyError(f"S3Proxy exited during start; see {self.daemon.log_file}")
            try:
                urllib.request.urlopen(self.endpoint_url + "/", timeout=2.0).close()
                return
            except urllib.error.HTTPError:
                return   # an unsigned request is refused (403): the server is up and checking signatures
            except OSError:
                time.sleep(0.2)
        raise S3ProxyError(f"S3Proxy did not answer on {self.endpoint_url} within {timeout_s:.0f} s; "
                           f"see {self.daemon.log_file}")

    def _write_config(self) -> None:
        self.blob_dir.mkdir(parents=True, exist_ok=True)
        props = {
            "s3proxy.endpoint": self.endpoint_url,
            "s3proxy.authorization": "aws-v2-or-v4",
            "s3proxy.identity": self.identity,
            "s3proxy.credential": self.credential,
            "jclouds.provider": "filesystem",
            # The backend's own login is unused by the filesystem provider but required by S3Proxy.
            "jclouds.identity": self.identity,
            "jclouds.credential": self.credential,
            "jclouds.filesystem.basedir": str(self.blob_dir),
        }
        self.config_file.write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    def _write_logback(self) -> Path:
        # S3Proxy's bundled logback config logs every Jetty event at DEBUG to stdout: keep INFO, in a file.
        path = self.data_dir / "logback.xml"
        path.write_text(
            "<configuration>\n"
            "  <appender name=\"FILE\" class=\"ch.qos.logback.core.FileAppender\">\n"
            f"    <file>{self.data_dir / 'logs' / 's3proxy.log'}</file>\n"
            "    <encoder><pattern>%d %level %logger{20} - %msg%n</pattern></encoder>\n"
            "  </appender>\n"
            "  <root level=\"INFO\"><appender-ref ref=\"FILE\"/></root>\n"
            "</configuration>\n"
        )
        return path


def _port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0
