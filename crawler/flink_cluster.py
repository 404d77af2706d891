"""A Flink standalone session cluster (one JobManager, one or more TaskManagers) run from the pip distribution.

The pip package (`apache-flink`) carries a whole Flink, but its `lib/` lacks two things we need, and
site-packages is not ours to change. So we build a cluster home under .cache (`flink-home/`):
`bin/` copied (the scripts find FLINK_HOME from their own real location), `opt/` and `plugins/`
linked to the distribution's, and a real `lib/` of links to the distribution's jars plus
`opt/flink-python-*.jar` (without it a second thread-mode job on a TaskManager fails in pemja,
docs/architecture.md §4) plus the Kafka connector from `crawler/java/flink-connectors/pom.xml`. Each stack
renders its own conf dir from `crawler/flink-conf/config.yaml` (docs/decisions/0600-flink-conf-template.md);
the home's `conf/` is the default stack's, so a bare `<home>/bin/flink run -py job.py` talks to
the cluster `crawler up` started.

JobManager and TaskManagers are started with `start-foreground` under our own pid files, which `exec`s
into the JVM, so the pid we record is the JVM's (docs/decisions/0602-stack-process-tracking.md).
A cluster may run several TaskManagers (failover and rescale tests kill or fill them); each has its
own pid file and console log, and Flink picks each one's RPC, data and metrics ports from what is
free. `settings` override the template's options for one cluster (e.g. its JobManager RPC port,
slots per TaskManager, restart strategy): they are written into the rendered config.yaml, so the
daemons and `bin/flink run` (the job's configuration) both see them (decision 1601).
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from crawler import maven
from crawler.daemon import Daemon
from crawler.paths import CACHE, FLINK_CONF

HOME = CACHE / "flink-home"
DEFAULT_STATE = CACHE / "stack" / "flink"
TEMPLATE_DIR = FLINK_CONF
DEFAULT_REST_PORT = 8081
# The dashboard is on loopback: an http_proxy from the environment must not be asked for it.
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
# Logging configs the scripts expect in FLINK_CONF_DIR; the distribution's are fine as they are.
_COPIED_CONF = ("log4j.properties", "log4j-cli.properties", "log4j-console.properties",
                "log4j-session.properties", "logback.xml", "logback-console.xml", "logback-session.xml")


# Set in any process that ran PyFlink in-process (a test session, a notebook): find_flink_home's
# paths into the pip distribution, and the variables of a local job's Python side. Inherited by a
# TaskManager, PYTHON_LOOPBACK_SERVER_ADDRESS makes its process-mode operators run their Python
# functions in that process's loopback worker pool, with that process's modules, instead of workers
# of their own (decision 3855); `python` picks the interpreter of pyflink-udf-runner.sh.
_FOREIGN_FLINK_ENV = ("FLINK_HOME", "FLINK_LIB_DIR", "FLINK_PLUGINS_DIR", "FLINK_OPT_DIR", "FLINK_BIN_DIR",
                      "PYTHON_LOOPBACK_SERVER_ADDRESS", "PYFLINK_GATEWAY_DISABLED", "PYFLINK_GATEWAY_PORT",
                      "_PYFLINK_CONN_INFO_PATH", "SEMI_PERSISTENT_DIRECTORY", "_PYTHON_WORKER_MEMORY_LIMIT",
                      "TABLE_LOCAL_TIME_ZONE", "python")


class FlinkClusterError(RuntimeError):
    """The cluster could not be built, started or reached; the message points at its logs."""


def pyflink_dir() -> Path:
    """The pip distribution's Flink (site-packages/pyflink), found without importing pyflink."""
    spec = importlib.util.find_spec("pyflink")
    if spec is None or not spec.submodule_search_locations:
        raise FlinkClusterError("pyflink is not installed in this interpreter (pip install apache-flink)")
    return Path(next(iter(spec.submodule_search_locations)))


def build_home(home: Path = HOME) -> Path:
    """Build (or refresh) the cluster home: bin copied, opt/plugins linked, lib with the extra jars,
    and conf/ rendered for the default stack. Resolves the connector jars with Maven (network on first
    use only). A home already built from the same parts is left as it is (a running cluster uses it)."""
    dist = pyflink_dir()
    connectors = sorted(maven.jar_dir("flink-connectors").glob("*.jar"))
    stamp = home / ".built-from"
    # What the home is made of: rebuilding is skipped while it would come out the same.
    recipe = "\n".join([str(dist), _venv_python(), *(str(j) for j in connectors),
                        (TEMPLATE_DIR / "config.yaml").read_text()])
    if stamp.is_file() and stamp.read_text() == recipe and (home / "bin" / "flink").is_file():
        return home
    home.mkdir(parents=True, exist_ok=True)
    stamp.unlink(missing_ok=True)
    shutil.rmtree(home / "bin", ignore_errors=True)
    shutil.copytree(dist / "bin", home / "bin")
    _relink(home / "plugins", dist / "plugins")
    # The client finds flink-python in opt/ with a file-tree walk that does not follow a linked
    # directory ("Found 0 flink-python jar"): opt/ is a real folder of linked files.
    _clear(home / "opt")
    shutil.copytree(dist / "opt", home / "opt", copy_function=os.symlink)
    lib = home / "lib"
    shutil.rmtree(lib, ignore_errors=True)
    lib.mkdir()
    extra = [*sorted((dist / "opt").glob("flink-python-*.jar")), *connectors]
    for jar in [*sorted((dist / "lib").glob("*.jar")), *extra]:
        (lib / jar.name).symlink_to(jar)
    render_conf(home / "conf", DEFAULT_STATE)
    stamp.write_text(recipe)
    return home


def render_conf(conf_dir: Path, state_dir: Path, *, rest_port: int = DEFAULT_REST_PORT,
                python: str | None = None, settings: Mapping[str, str] | None = None) -> Path:
    """Write the effective conf dir: crawler/flink-conf/config.yaml with its placeholders replaced by absolute
    paths (state folder, virtualenv python and its site-packages, REST port), then `settings` as
    flat `key: value` lines (Flink reads the file in order, so a later key wins over the template's),
    plus the distribution's logging configs."""
    python = python or _venv_python()
    text = (TEMPLATE_DIR / "config.yaml").read_text()
    for placeholder, value in (("{{STATE}}", str(state_dir.resolve())), ("{{PYTHON}}", python),
                               ("{{PYTHON_SITE_PACKAGES}}", _site_packages(python)),
                               ("{{REST_PORT}}", str(rest_port))):
        text = text.replace(placeholder, value)
    left = re.search(r"\{\{\w+\}\}", text)
    if left:
        raise FlinkClusterError(f"crawler/flink-conf/config.yaml has an unknown placeholder {left.group()}")
    if settings:
        text += "\n# This cluster's own settings (crawler.flink_cluster.FlinkCluster(settings=...)).\n"
        text += "".join(f"{key}: {json.dumps(str(value))}\n" for key, value in settings.items())
    conf_dir.mkdir(parents=True, exist_ok=True)
    (conf_dir / "config.yaml").write_text(text)
    dist_conf = pyflink_dir() / "conf"
    for name in _COPIED_CONF:
        shutil.copyfile(dist_conf / name, conf_dir / name)
    (conf_dir / "masters").write_text(f"localhost:{rest_port}\n")
    (conf_dir / "workers").write_text("localhost\n")
    return conf_dir


def flink_bin(home: Path = HOME) -> Path:
    """Path of the cluster's `bin/flink` (building the home on first use), e.g. for
    `[flink_bin(), "run", "-py", "jobs/crawl.py"]`; pair it with `FlinkCluster.env()` for a stack
    other than the default one."""
    return build_home(home) / "bin" / "flink"


def _venv_python() -> str:
    # The interpreter running us is the project's virtualenv one (`.venv/bin/crawler`, pytest).
    return str(Path(sys.executable).absolute())


def _site_packages(python: str) -> str:
    if python == _venv_python():
        return sysconfig.get_paths()["purelib"]
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def _clear(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def _relink(link: Path, target: Path) -> None:
    _clear(link)
    link.symlink_to(target, target_is_directory=True)


class FlinkCluster:
    """One JobManager and `taskmanagers` TaskManagers whose conf, logs, pids and checkpoints live in `state_dir`."""

    def __init__(self, state_dir: Path = DEFAULT_STATE, *, home: Path = HOME,
                 rest_port: int = DEFAULT_REST_PORT, taskmanagers: int = 1,
                 settings: Mapping[str, str] | None = None) -> None:
        if taskmanagers < 1:
            raise ValueError(f"a cluster needs at least one TaskManager, got taskmanagers={taskmanagers}")
        bad = [key for key in settings or {} if not re.fullmatch(r"[A-Za-z0-9_.-]+", key)]
        if bad:
            raise ValueError(f"Flink option names are dotted words, got {bad}")
        self.state_dir = Path(state_dir).resolve()
        self.home = home
        self.rest_port = rest_port
        self.settings = dict(settings or {})
        self.conf_dir = self.state_dir / "conf"
        run = self.state_dir / "run"
        log = self.state_dir / "log"
        self.jobmanager = Daemon("flink-jobmanager", run / "jobmanager.pid", log / "jobmanager.console")
        # The first keeps the single-TaskManager names, so a stack started before still stops.
        self.taskmanagers = [Daemon("flink-taskmanager" + suffix, run / f"taskmanager{suffix}.pid",
                                    log / f"taskmanager{suffix}.console")
                             for suffix in ["", *(f"-{n}" for n in range(2, taskmanagers + 1))]]

    @property
    def taskmanager(self) -> Daemon:
        """The first TaskManager (the only one by default)."""
        return self.taskmanagers[0]

    @property
    def rest_url(self) -> str:
        """The REST API and dashboard."""
        return f"http://localhost:{self.rest_port}"

    def env(self) -> dict[str, str]:
        """The environment for Flink's scripts (`bin/flink`, jobmanager.sh) aimed at this cluster."""
        env = dict(os.environ)
        env.update(FLINK_CONF_DIR=str(self.conf_dir), FLINK_LOG_DIR=str(self.state_dir / "log"),
                   FLINK_PID_DIR=str(self.state_dir / "run"))
        # A FLINK_HOME from the caller's shell would point the scripts at another distribution, and a
        # process that has used PyFlink in-process (a test session) carries FLINK_LIB_DIR and friends
        # aimed at the pip distribution's lib/, which lacks the Kafka connector, and the address of its
        # own Python worker pool, which a TaskManager would hand its jobs' functions to.
        for name in _FOREIGN_FLINK_ENV:
            env.pop(name, None)
        return env

    def start(self, timeout_s: float = 120.0) -> None:
        """Start whichever of the JobManager and TaskManagers is not running, then wait until the REST
        API reports every TaskManager registered. A cluster already up is left alone; a TaskManager
        that died (or was killed) is started again."""
        daemons = [self.jobmanager, *self.taskmanagers]
        if all(d.pid() is None for d in daemons):
            if self.overview(timeout_s=1.0) is not None:
                raise FlinkClusterError(f"another Flink already answers on {self.rest_url}")
            flink_bin(self.home)
            render_conf(self.conf_dir, self.state_dir, rest_port=self.rest_port, settings=self.settings)
        script = {self.jobmanager.name: "jobmanager.sh"}
        for daemon in daemons:
            if daemon.pid() is None:
                command = self.home / "bin" / script.get(daemon.name, "taskmanager.sh")
                # In the state folder, so a JVM crash report (hs_err_pid*.log) lands with the logs.
                daemon.spawn([str(command), "start-foreground"], env=self.env(), cwd=self.state_dir)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for daemon in daemons:
                if daemon.pid() is None:
                    raise FlinkClusterError(f"{daemon.name} exited while starting; see {self.state_dir / 'log'}")
            if self.registered_taskmanagers() >= len(self.taskmanagers):
                return
            time.sleep(0.5)
        raise FlinkClusterError(f"Flink not ready on {self.rest_url} after {timeout_s} s; "
                                f"see {self.state_dir / 'log'}")

    def registered_taskmanagers(self) -> int:
        """TaskManagers the JobManager counts as registered now (0 if it does not answer). A killed one
        stays counted until its heartbeat times out."""
        overview = self.overview(timeout_s=2.0) or {}
        return int(overview.get("taskmanagers", 0))

    def stop(self, timeout_s: float = 30.0) -> list[str]:
        """Stop the TaskManagers, then the JobManager we started; returns the names stopped. TaskManagers
        of an earlier start with more of them (their pid files are here) are stopped too."""
        return [d.name for d in (*self._every_taskmanager(), self.jobmanager) if d.stop(timeout_s)]

    def restart_taskmanagers(self, timeout_s: float = 120.0) -> int:
        """Stop every TaskManager this state folder started and start each again, so that the next job
        imports its code afresh: a TaskManager's embedded interpreter (thread mode) keeps the modules it
        imported for as long as its JVM lives. Returns how many were restarted; 0 when none of ours
        runs (a cluster started elsewhere, whose TaskManagers this cannot restart)."""
        running = [d for d in self._every_taskmanager() if d.pid() is not None]
        if not running:
            return 0
        others = self.registered_taskmanagers() - len(running)
        for daemon in running:
            daemon.stop()
        deadline = time.monotonic() + timeout_s
        while self.registered_taskmanagers() > max(others, 0):
            if time.monotonic() > deadline:
                raise FlinkClusterError(f"TaskManagers still registered {timeout_s} s after they stopped")
            time.sleep(0.5)
        for daemon in running:
            daemon.spawn([str(self.home / "bin" / "taskmanager.sh"), "start-foreground"], env=self.env(),
                         cwd=self.state_dir)
        while self.registered_taskmanagers() < max(others, 0) + len(running):
            if time.monotonic() > deadline:
                raise FlinkClusterError(f"TaskManagers not registered again after {timeout_s} s; "
                                        f"see {self.state_dir / 'log'}")
            for daemon in running:
                if daemon.pid() is None:
                    raise FlinkClusterError(f"{daemon.name} exited while starting; see {self.state_dir / 'log'}")
            time.sleep(0.5)
        return len(running)

    def _every_taskmanager(self) -> list[Daemon]:
        """This cluster's TaskManagers and those of an earlier start with more of them (pid files here)."""
        run, log = self.state_dir / "run", self.state_dir / "log"
        known = {d.pid_file for d in self.taskmanagers}
        extra = [Daemon(f"flink-{path.stem}", path, log / f"{path.stem}.console")
                 for path in sorted(run.glob("taskmanager-*.pid")) if path not in known]
        return [*self.taskmanagers, *extra]

    def overview(self, timeout_s: float = 5.0) -> dict[str, object] | None:
        """The REST API's /overview (taskmanagers, slots, jobs running...), or None if nothing answers."""
        return self.rest("/overview", timeout_s)

    def rest(self, path: str, timeout_s: float = 5.0) -> Any:
        """GET `path` on the REST API as JSON, or None if nothing answers (or not with JSON)."""
        try:
            with _NO_PROXY.open(f"{self.rest_url}{path}", timeout=timeout_s) as resp:
                return json.loads(resp.read())
        except (urllib.error.URLError, OSError, ValueError):
            return None
