"""`crawler upgrade`, `crawler rescale` and `crawler restore`: start the crawl job from its state.

Both stop the running crawl job with a savepoint (`flink stop`: sources stop, state is written, the
job ends) and submit `jobs/crawl.py` as it is now from that savepoint, with the arguments the old job
was started with; `rescale` adds `--set job.parallelism=N` (Flink moves whole key groups between
subtasks, docs/architecture.md §6). The old job's arguments are read back from the cluster: jobs/crawl.py
stores its own argv as a global job parameter (JOB_ARGS_KEY), so this works for a job started by
`crawler crawl`, by an earlier upgrade, or by hand. Everything the new job would be given is checked
(`udfs.config.load_config`) before the old job is touched. See docs/runbook.md and decision 1602.

`restore` submits the job from a savepoint or retained checkpoint after it stopped or failed, with the
arguments of the job that left it (read back from the cluster) or given as JSON (`--job-args`).
All three refuse to start a job that would resume past records Kafka has deleted (a retention gap,
bus/retention_gap.py) unless told `--accept-retention-gap` (decision 3791).
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException

from crawler.flink_cluster import DEFAULT_REST_PORT, FlinkCluster
from crawler.paths import ROOT
from bus.retention_gap import RetentionGapError, RetentionReport, read_report, refuse_gap
from crawler.stack import DEFAULT_STATE_DIR
from udfs.config import ConfigError, CrawlConfig, load_config
from udfs.jobconfig import JOB_ARGS_KEY

JOB_FILE = ROOT / "jobs" / "crawl.py"
_JOB_ID = re.compile(r"JobID ([0-9a-f]{32})")
_SAVEPOINT = re.compile(r"Savepoint completed\. Path: (\S+)")
_ENDED_STATES = frozenset({"FINISHED", "CANCELED", "FAILED"})   # a job in any other state holds TaskManagers


class UpgradeError(RuntimeError):
    """The upgrade could not start, or stopped half-way; the message says what state things are in."""


@dataclass(frozen=True)
class Upgrade:
    """What an upgrade did: the job it stopped, where that job's state went, the job that replaced it."""

    old_job: str
    savepoint: str
    new_job: str


def running_crawl_job(jobs: Sequence[dict[str, Any]], job_id: str | None = None) -> dict[str, Any]:
    """The job to replace among `/jobs/overview` entries: `job_id` if given (it must be running),
    else the only running job. Raises UpgradeError when there is none, or several to choose from."""
    running = [job for job in jobs if job.get("state") == "RUNNING"]
    if job_id is not None:
        found = [job for job in running if job.get("jid") == job_id]
        if not found:
            raise UpgradeError(f"job {job_id} is not running (running: {_names(running) or 'none'})")
        return found[0]
    if not running:
        raise UpgradeError("no job is running: start one with `crawler crawl` first")
    if len(running) > 1:
        raise UpgradeError(f"{len(running)} jobs are running ({_names(running)}): say which with --job-id")
    return running[0]


def _names(jobs: Sequence[dict[str, Any]]) -> str:
    return ", ".join(f"{job.get('jid')} ({job.get('name')})" for job in jobs)


def job_args(job_config: dict[str, Any] | None) -> list[str]:
    """The argv jobs/crawl.py was started with, from the REST API's `/jobs/<id>/config`; raises
    UpgradeError for a job that did not record it (not our crawl job, or one from an older release)."""
    user_config = ((job_config or {}).get("execution-config") or {}).get("user-config") or {}
    raw = user_config.get(JOB_ARGS_KEY)
    if raw is None:
        raise UpgradeError(f"the job does not carry its arguments ({JOB_ARGS_KEY}): is it jobs/crawl.py "
                           "of this release? Stop it by hand (`flink stop`) and start it with `flink run -s`")
    try:
        args = json.loads(raw)
    except ValueError:
        args = None
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise UpgradeError(f"{JOB_ARGS_KEY} is not a JSON list of strings: {raw[:200]!r}")
    return args


def with_overrides(args: Sequence[str], overrides: Sequence[str]) -> list[str]:
    """The job's argv with more `--set SECTION.KEY=VALUE` pairs at the end (a later pair wins)."""
    return [*args, *(item for pair in overrides for item in ("--set", pair))]


def check_job_config(args: Sequence[str]) -> CrawlConfig:
    """The configuration the job would load from `args` (`--config FILE`, `--set` pairs), read as
    jobs/crawl.py reads it; raises UpgradeError with load_config's message when it is invalid."""
    config_file, overrides = None, []
    items = iter(args)
    for item in items:
        if item == "--config":
            config_file = Path(next(items, ""))
        elif item == "--set":
            overrides.append(next(items, ""))
    try:
        text = config_file.read_text(encoding="utf-8") if config_file else ""
        return load_config(text, overrides)
    except (ConfigError, OSError) as exc:
        raise UpgradeError(f"the new job's configuration is invalid, nothing was stopped: {exc}") from None


def arg_value(args: Sequence[str], option: str) -> str | None:
    """The value of the last `option VALUE` (or `option=VALUE`) among the job's arguments, None if absent."""
    found = None
    for i, item in enumerate(args):
        if item == option and i + 1 < len(args):
            found = args[i + 1]
        elif item.startswith(option + "="):
            found = item[len(option) + 1:]
    return found


def check_retention(args: Sequence[str], config: CrawlConfig, *, accept: bool, doing: str,
                    progress: Callable[[str], None] = print) -> RetentionReport:
    """The retention report of the job's consumer group on the broker its arguments name; raises
    UpgradeError for a gap unless `accept` (`doing` says what has and has not happened), or when the
    broker cannot be asked. An accepted gap is printed; the job reports it again when it starts."""
    bootstrap = arg_value(args, "--bootstrap")
    if not bootstrap:
        raise UpgradeError(f"the job's arguments name no --bootstrap: cannot check the Kafka retention; {doing}")
    try:
        report = read_report(bootstrap, config.job.group_id)
    except (KafkaException, TimeoutError) as exc:
        raise UpgradeError(f"Kafka at {bootstrap} did not answer, so the topics' retention could not be "
                           f"checked ({exc}); {doing}") from None
    try:
        refuse_gap(report, accept, doing)
    except RetentionGapError as exc:
        raise UpgradeError(str(exc)) from None
    if report.lost:
        progress(f"accepted (--accept-retention-gap): {report.summary()}")
    return report


def run_command(flink: Path, args: Sequence[str], savepoint: str, *, python: str = sys.executable,
                allow_non_restored_state: bool = False, job_file: Path = JOB_FILE) -> list[str]:
    """`flink run -d -s SAVEPOINT [-n] -py jobs/crawl.py --pyExecutable PYTHON ARGS...`. Flink's own
    options come before the job's first unknown option, after which all is the job's argv."""
    command = [str(flink), "run", "-d", "-s", savepoint]
    if allow_non_restored_state:
        command.append("--allowNonRestoredState")
    return [*command, "-py", str(job_file), "--pyExecutable", python, *args]


def unmapped_state_hint(output: str) -> str:
    """What to do when Flink refused a savepoint holding state of an operator the new job lacks ("" for
    any other failure): a savepoint of a release before every operator had a uid (decision 3915)
    restores once with --allow-non-restored-state, and any other such refusal means a stateful
    operator's uid changed."""
    if "Cannot map checkpoint/savepoint state" not in output:
        return ""
    return ("\nThe savepoint holds state of an operator the new job does not have. A savepoint of a release "
            "before every operator had a uid (docs/decisions/3915) holds the Kafka sink's and PyFlink's "
            "key-by maps' state under ids from their place in the graph, state that holds no URL: restore it "
            "once with --allow-non-restored-state. Otherwise a stateful operator's uid changed: restore with "
            "the code that took the savepoint.")


def savepoint_of(output: str) -> str | None:
    """The savepoint path `flink stop` printed, or None."""
    found = _SAVEPOINT.search(output)
    return found.group(1) if found else None


def job_id_of(output: str) -> str | None:
    """The job id `flink run -d` printed, or None."""
    found = _JOB_ID.search(output)
    return found.group(1) if found else None


def upgrade(cluster: FlinkCluster, *, job_id: str | None = None, overrides: Sequence[str] = (),
            savepoint_dir: Path | None = None, allow_non_restored_state: bool = False,
            accept_retention_gap: bool = False,
            progress: Callable[[str], None] = print, timeout_s: float = 300.0) -> Upgrade:
    """Stop the running crawl job with a savepoint and submit the current jobs/crawl.py from it. A retention
    gap is refused before the old job is touched, and again once the savepoint has set the offsets the
    new job resumes at, unless `accept_retention_gap`."""
    overview = cluster.rest("/jobs/overview")
    if overview is None:
        raise UpgradeError(f"no Flink cluster answers on {cluster.rest_url} (`crawler up`?)")
    job = running_crawl_job(overview.get("jobs", []), job_id)
    old = job["jid"]
    args = with_overrides(job_args(cluster.rest(f"/jobs/{old}/config")), overrides)
    config = check_job_config(args)
    check_retention(args, config, accept=accept_retention_gap, doing=f"nothing was stopped (job {old} still runs)",
                    progress=progress)
    progress(f"stopping job {old} ({job.get('name')}) with a savepoint ...")
    stop = [str(cluster.home / "bin" / "flink"), "stop"]
    if savepoint_dir is not None:
        stop += ["--savepointPath", savepoint_dir.resolve().as_uri()]
    done = subprocess.run([*stop, old], env=cluster.env(), capture_output=True, text=True, timeout=timeout_s)
    savepoint = savepoint_of(done.stdout + done.stderr)
    if done.returncode != 0 or savepoint is None:
        state = job_overview(cluster, old).get("state", "UNKNOWN")
        raise UpgradeError(f"the savepoint failed (flink stop exit {done.returncode}); job {old} is {state} and "
                           f"was not replaced:\n{(done.stdout + done.stderr)[-2000:]}")
    progress(f"savepoint: {savepoint}")
    # The savepoint committed the offsets the new job resumes at: the check that counts.
    check_retention(args, config, accept=accept_retention_gap, progress=progress,
                    doing=f"job {old} is stopped and its state is in {savepoint}; nothing was started. "
                          f"Start it with `crawler restore {savepoint} --job-id {old}`")
    fresh_taskmanagers(cluster, progress)
    run = run_command(cluster.home / "bin" / "flink", args, savepoint,
                      allow_non_restored_state=allow_non_restored_state)
    started = subprocess.run(run, env=cluster.env(), cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
    output = started.stdout + started.stderr
    new = job_id_of(output)
    if started.returncode != 0 or new is None:
        raise UpgradeError(f"job {old} is stopped and its state is in {savepoint}, but the new job did not start "
                           f"(flink run exit {started.returncode}); fix the cause and run by hand:\n"
                           f"  {' '.join(run)}\n{output[-2000:]}"
                           f"{unmapped_state_hint(output)}")
    progress(f"new job: {new}")
    return Upgrade(old_job=old, savepoint=savepoint, new_job=new)


def fresh_taskmanagers(cluster: FlinkCluster, progress: Callable[[str], None]) -> None:
    """Restart the local stack's TaskManagers before a job of new code starts on them: their embedded
    interpreter (thread-mode operators) keeps the modules an earlier job imported, so without a restart
    those operators would run the old code, or fail on a mix of old and new. A cluster started elsewhere,
    or one where another job still runs, is told about, not touched."""
    busy = [job["jid"] for job in (cluster.rest("/jobs/overview") or {}).get("jobs", [])
            if job.get("state") not in _ENDED_STATES]
    restarted = 0 if busy else cluster.restart_taskmanagers()
    if restarted:
        progress(f"restarted {restarted} TaskManager(s): the new job imports its code afresh")
        return
    why = f"job(s) {', '.join(busy)} still run on them" if busy else "`crawler up` did not start them"
    progress(f"warning: the TaskManagers were not restarted ({why}); if the code changed, restart them before "
             f"the new job runs (thread-mode operators keep the modules they imported)")


def restore(cluster: FlinkCluster, path: str, args: Sequence[str], *, accept_retention_gap: bool = False,
            allow_non_restored_state: bool = False, progress: Callable[[str], None] = print,
            timeout_s: float = 300.0) -> str:
    """Submit the current jobs/crawl.py from the savepoint or retained checkpoint at `path` with `args`
    (checked as upgrade checks them, a retention gap refused unless `accept_retention_gap`); returns the
    new job's id."""
    config = check_job_config(args)
    check_retention(args, config, accept=accept_retention_gap, doing="nothing was started", progress=progress)
    if cluster.rest("/jobs/overview") is None:
        raise UpgradeError(f"no Flink cluster answers on {cluster.rest_url} (`crawler up`?)")
    fresh_taskmanagers(cluster, progress)
    run = run_command(cluster.home / "bin" / "flink", args, path, allow_non_restored_state=allow_non_restored_state)
    started = subprocess.run(run, env=cluster.env(), cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
    output = started.stdout + started.stderr
    new = job_id_of(output)
    if started.returncode != 0 or new is None:
        raise UpgradeError(f"the job did not start from {path} (flink run exit {started.returncode}):\n"
                           f"  {' '.join(run)}\n{output[-2000:]}"
                           f"{unmapped_state_hint(output)}")
    progress(f"new job: {new}")
    return new


def restore_args(cluster: FlinkCluster, job_id: str | None, given: str | None,
                 overrides: Sequence[str] = ()) -> list[str]:
    """The arguments of a restored job: `given` (a JSON list of strings), else those of the job `job_id` as
    the cluster remembers it (a FAILED, CANCELED or FINISHED job too), with `overrides` at the end."""
    if given is not None and job_id:
        raise UpgradeError("give either --job-id or --job-args, not both")
    if given is None and not job_id:
        raise UpgradeError(f"say whose arguments the job takes: --job-id OLD_JOB (the job that left the state), "
                           f"or --job-args JSON (its configuration tab shows them under {JOB_ARGS_KEY})")
    config = cluster.rest(f"/jobs/{job_id}/config") if given is None else \
        {"execution-config": {"user-config": {JOB_ARGS_KEY: given}}}
    if config is None:
        raise UpgradeError(f"the cluster does not know job {job_id} (restarted since?): give --job-args")
    return with_overrides(job_args(config), overrides)


def job_overview(cluster: FlinkCluster, job_id: str) -> dict[str, Any]:
    """The job's entry of `/jobs/overview` (state, task counts by status), {} if absent. Unlike
    `/jobs/<id>`, this handler reads no metrics: polling it never makes TaskManagers evaluate the
    Python operators' gauges, which can crash a TaskManager while its tasks restart (decision 1603)."""
    jobs = (cluster.rest("/jobs/overview") or {}).get("jobs", [])
    return next((job for job in jobs if job.get("jid") == job_id), {})


def wait_running(cluster: FlinkCluster, job_id: str, timeout_s: float = 180.0) -> str:
    """Wait until every task of the job runs (its state alone says RUNNING while tasks deploy);
    returns the last job state seen."""
    deadline, state = time.monotonic() + timeout_s, "UNKNOWN"
    while time.monotonic() < deadline:
        job = job_overview(cluster, job_id)
        state = job.get("state", "UNKNOWN")
        if state in ("FAILED", "CANCELED", "FINISHED"):
            return state
        tasks = job.get("tasks") or {}
        if state == "RUNNING" and tasks.get("total") and tasks.get("running") == tasks.get("total"):
            return state
        time.sleep(1.0)
    return state


def failure_summary(stacktrace: str) -> str:
    """A Java stack trace in one line: its first line and its innermost `Caused by:` (the root cause),
    which is what an operator needs to tell a bad savepoint from a lost TaskManager."""
    lines = [line.strip() for line in stacktrace.splitlines() if line.strip()]
    if not lines:
        return ""
    causes = [line for line in lines if line.startswith("Caused by:")]
    return lines[0] if not causes or causes[-1] == lines[0] else f"{lines[0]} ... {causes[-1]}"


def last_failure(cluster: FlinkCluster, job_id: str) -> str:
    """The job's newest failure from its exception history (`/jobs/<id>/exceptions`), in one line with
    the task it hit; "" if the cluster recorded none."""
    exceptions = cluster.rest(f"/jobs/{job_id}/exceptions") or {}
    history = (exceptions.get("exceptionHistory") or {}).get("entries") or []
    if not history:   # older clusters also give the root exception alone
        return failure_summary(exceptions.get("root-exception") or "")
    newest = max(history, key=lambda entry: entry.get("timestamp") or 0)
    summary = failure_summary(newest.get("stacktrace") or newest.get("exceptionName") or "")
    task = newest.get("taskName")
    return f"{summary} (in {task})" if task else summary


# --- the `crawler` subcommands of this module (see crawler/cli.py) -----------------------------------

def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `upgrade`, `rescale` and `restore` to the `crawler` command line."""
    starts = argparse.ArgumentParser(add_help=False)
    starts.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR,
                        help="the stack's state folder (default: %(default)s)")
    starts.add_argument("--rest-port", type=int, default=DEFAULT_REST_PORT, help="Flink REST/dashboard")
    starts.add_argument("--allow-non-restored-state", action="store_true",
                        help="start even if the savepoint holds state of an operator the new code lacks")
    starts.add_argument("--accept-retention-gap", action="store_true",
                        help="start even if Kafka deleted input records the job had not read (see docs/runbook.md)")
    common = argparse.ArgumentParser(add_help=False, parents=[starts])
    common.add_argument("--job-id", help="the job to replace (default: the only running job)")
    common.add_argument("--savepoint-dir", type=Path, help="where the savepoint goes (default: the cluster's)")
    upgrade_cmd = subparsers.add_parser(
        "upgrade", parents=[common], help="stop the crawl job with a savepoint, start the current code from it")
    upgrade_cmd.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                             help="change a setting of the job on the way (repeatable)")
    upgrade_cmd.set_defaults(func=_cmd_upgrade)
    rescale = subparsers.add_parser(
        "rescale", parents=[common], help="stop the crawl job with a savepoint, start it from it at another parallelism")
    rescale.add_argument("--parallelism", type=int, required=True, help="frontier shards (<= job.max_parallelism)")
    rescale.add_argument("--fetch-parallelism", type=int,
                         help="fetch subtasks (job.fetch_parallelism; default: as the job has them)")
    rescale.set_defaults(func=_cmd_rescale)
    restore_cmd = subparsers.add_parser(
        "restore", parents=[starts], help="start the crawl job from a savepoint or retained checkpoint")
    restore_cmd.add_argument("path", help="the savepoint or checkpoint (chk-N) folder, or its URI")
    restore_cmd.add_argument("--job-id", help="the job that left it: its arguments are reused")
    restore_cmd.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                             help="change a setting of the job on the way (repeatable)")
    restore_cmd.add_argument("--job-args", metavar="JSON",
                             help="or the arguments of jobs/crawl.py as a JSON list of strings (as the job's "
                                  f"configuration shows them under {JOB_ARGS_KEY})")
    restore_cmd.set_defaults(func=_cmd_restore)


def _cluster(args: argparse.Namespace) -> FlinkCluster:
    return FlinkCluster(Path(args.state_dir).resolve() / "flink", rest_port=args.rest_port)


def _run(args: argparse.Namespace, overrides: list[str]) -> int:
    cluster = _cluster(args)
    done = upgrade(cluster, job_id=args.job_id, overrides=overrides, savepoint_dir=args.savepoint_dir,
                   allow_non_restored_state=args.allow_non_restored_state,
                   accept_retention_gap=args.accept_retention_gap)
    state = wait_running(cluster, done.new_job)
    outcome = {"stopped": done.old_job, "savepoint": done.savepoint, "started": done.new_job, "state": state,
               "dashboard": f"{cluster.rest_url}/#/job/running/{done.new_job}/overview"}
    if state != "RUNNING":
        # Why the new job is not running, so the operator need not dig it out of the dashboard.
        outcome["failure"] = last_failure(cluster, done.new_job) or "no failure recorded"
    print(json.dumps(outcome))
    return 0 if state == "RUNNING" else 1


def _cmd_upgrade(args: argparse.Namespace) -> int:
    return _run(args, args.overrides)


def _cmd_rescale(args: argparse.Namespace) -> int:
    return _run(args, rescale_overrides(args.parallelism, args.fetch_parallelism))


def rescale_overrides(parallelism: int, fetch_parallelism: int | None = None) -> list[str]:
    """The settings `crawler rescale` changes: the frontier's shards and, when given, the fetch subtasks
    (each server address then belongs to the fetch subtask its key group reaches at the new width)."""
    for flag, value in (("--parallelism", parallelism), ("--fetch-parallelism", fetch_parallelism)):
        if value is not None and value < 1:
            raise ValueError(f"{flag} must be at least 1, got {value}")
    fetch = [] if fetch_parallelism is None else [f"job.fetch_parallelism={fetch_parallelism}"]
    return [f"job.parallelism={parallelism}", *fetch]


def _cmd_restore(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    job_args_ = restore_args(cluster, args.job_id, args.job_args, args.overrides)
    new = restore(cluster, args.path, job_args_, accept_retention_gap=args.accept_retention_gap,
                  allow_non_restored_state=args.allow_non_restored_state)
    state = wait_running(cluster, new)
    outcome = {"restored": args.path, "started": new, "state": state,
               "dashboard": f"{cluster.rest_url}/#/job/running/{new}/overview"}
    if state != "RUNNING":
        outcome["failure"] = last_failure(cluster, new) or "no failure recorded"
    print(json.dumps(outcome))
    return 0 if state == "RUNNING" else 1
