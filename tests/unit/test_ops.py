"""The pure parts of `crawler upgrade` / `crawler rescale` (crawler/ops.py): which job to replace,
its arguments read back from the REST API, the configuration checked before anything is stopped,
the `flink run` command line and what is read from Flink's output. The whole upgrade runs against a
real cluster in tests/integration/test_rescale.py."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from crawler.cli import build_parser, main
from crawler.ops import (JOB_ARGS_KEY, UpgradeError, check_job_config, failure_summary, job_args, job_id_of,
                         rescale_overrides, run_command, running_crawl_job, savepoint_of, unmapped_state_hint,
                         with_overrides)
from tests.integration.harness import free_port

RUNNING = {"jid": "a" * 32, "name": "crawl run1", "state": "RUNNING"}
FINISHED = {"jid": "b" * 32, "name": "crawl old", "state": "FINISHED"}
ARGS = ["--bootstrap", "127.0.0.1:9092", "--job-name", "crawl run1", "--set", "job.parallelism=2"]


def _config(args: object) -> dict:
    return {"jid": "a" * 32, "execution-config": {"user-config": {JOB_ARGS_KEY: json.dumps(args)}}}


def test_the_only_running_job_is_the_one_replaced():
    assert running_crawl_job([FINISHED, RUNNING]) == RUNNING


def test_a_named_job_is_replaced_among_several():
    other = {**RUNNING, "jid": "c" * 32}
    assert running_crawl_job([RUNNING, other], job_id="c" * 32) == other


@pytest.mark.parametrize("jobs, job_id, message", [
    ([], None, "no job is running"),
    ([FINISHED], None, "no job is running"),
    ([RUNNING, {**RUNNING, "jid": "c" * 32}], None, "2 jobs are running"),
    ([RUNNING], "d" * 32, "is not running"),
    ([FINISHED], "b" * 32, "is not running"),
])
def test_no_or_ambiguous_running_job_is_a_clear_error(jobs, job_id, message):
    with pytest.raises(UpgradeError, match=message):
        running_crawl_job(jobs, job_id)


def test_job_arguments_are_read_back_from_the_job_config():
    assert job_args(_config(ARGS)) == ARGS


@pytest.mark.parametrize("config, message", [
    (None, "does not carry its arguments"),
    ({"execution-config": {"user-config": {}}}, "does not carry its arguments"),
    ({"execution-config": {"user-config": {JOB_ARGS_KEY: "not json"}}}, "JSON list of strings"),
    (_config({"bootstrap": "x"}), "JSON list of strings"),
    (_config([1, 2]), "JSON list of strings"),
])
def test_a_job_without_readable_arguments_is_refused(config, message):
    with pytest.raises(UpgradeError, match=message):
        job_args(config)


def test_the_key_is_the_one_the_job_writes():
    from jobs import crawl

    assert crawl.JOB_ARGS_KEY is JOB_ARGS_KEY   # one definition, udfs/jobconfig.py


def test_overrides_come_last_so_they_win():
    args = with_overrides(ARGS, ["job.parallelism=4"])
    assert args[-2:] == ["--set", "job.parallelism=4"]
    assert check_job_config(args).job.parallelism == 4


def test_the_config_file_is_read_again_as_it_is_now(tmp_path: Path):
    toml = tmp_path / "crawl.toml"
    toml.write_text("[politeness]\ndefault_delay_s = 3.0\n")
    assert check_job_config(["--config", str(toml), *ARGS]).politeness.default_delay_s == 3.0


@pytest.mark.parametrize("extra, message", [
    (["--set", "job.parallelism=0"], "parallelism"),
    (["--set", "job.parallelism=4", "--set", "job.max_parallelism=2"], "exceeds max_parallelism"),
    (["--set", "job.no_such_key=1"], "no_such_key"),
    (["--config", "/nonexistent/crawl.toml"], "crawl.toml"),
])
def test_an_invalid_new_configuration_is_refused_before_anything_stops(extra, message):
    with pytest.raises(UpgradeError, match=f"nothing was stopped.*{message}"):
        check_job_config([*ARGS, *extra])


def test_run_command_restores_the_savepoint_with_flink_options_before_the_job_args():
    command = run_command(Path("/f/bin/flink"), ARGS, "file:/sp/savepoint-1", python="/venv/python",
                          job_file=Path("/p/jobs/crawl.py"))
    assert command == ["/f/bin/flink", "run", "-d", "-s", "file:/sp/savepoint-1", "-py", "/p/jobs/crawl.py",
                       "--pyExecutable", "/venv/python", *ARGS]
    assert "--allowNonRestoredState" not in command


def test_non_restored_state_is_allowed_only_when_asked():
    command = run_command(Path("flink"), ARGS, "sp", allow_non_restored_state=True)
    assert command.index("--allowNonRestoredState") < command.index("-py")


def test_a_refused_savepoint_of_an_operator_the_job_lacks_says_how_to_restore_it():
    refused = ("Caused by: java.lang.IllegalStateException: Failed to rollback to checkpoint/savepoint file:/sp. "
               "Cannot map checkpoint/savepoint state for operator 126a05bc26e9bafc7b81c66fb0c99721 to the new "
               "program, because the operator is not available in the new program.")
    assert "--allow-non-restored-state" in unmapped_state_hint(refused) and "3915" in unmapped_state_hint(refused)
    assert unmapped_state_hint("java.net.ConnectException: Connection refused") == ""


def test_savepoint_path_and_job_id_are_read_from_flink_output():
    stop = "Suspending job \"x\" with a CANONICAL savepoint.\nSavepoint completed. Path: file:/tmp/sp/savepoint-0a1b-2c3d\n"
    assert savepoint_of(stop) == "file:/tmp/sp/savepoint-0a1b-2c3d"
    assert savepoint_of("org.apache.flink.util.FlinkException: Could not stop with a savepoint") is None
    assert job_id_of("Job has been submitted with JobID 0123456789abcdef0123456789abcdef") == "0123456789abcdef0123456789abcdef"
    assert job_id_of("error") is None


def test_a_failure_is_summarised_by_its_first_line_and_its_root_cause():
    trace = ("org.apache.flink.runtime.JobException: Recovery is suppressed by FixedDelayRestartBackoffTimeStrategy\n"
             "\tat org.apache.flink.runtime.executiongraph.failover.ExecutionFailureHandler.handleFailure(X.java:1)\n"
             "Caused by: java.lang.RuntimeException: Error while restoring\n\tat a.b(C.java:2)\n"
             "Caused by: java.io.FileNotFoundException: /sp/_metadata (No such file or directory)\n\t... 9 more\n")
    assert failure_summary(trace) == ("org.apache.flink.runtime.JobException: Recovery is suppressed by "
                                      "FixedDelayRestartBackoffTimeStrategy ... Caused by: java.io.FileNotFoundException: "
                                      "/sp/_metadata (No such file or directory)")
    assert failure_summary("java.lang.OutOfMemoryError: Java heap space\n\tat x.y(Z.java:3)") == \
        "java.lang.OutOfMemoryError: Java heap space"
    assert failure_summary("") == ""


@pytest.mark.parametrize("command", ["upgrade", "rescale"])
def test_cli_registers_upgrade_and_rescale(command):
    extra = ["--parallelism", "4"] if command == "rescale" else []
    args = build_parser().parse_args([command, *extra])
    assert callable(args.func) and args.allow_non_restored_state is False


def test_upgrade_without_a_cluster_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    assert main(["upgrade", "--state-dir", str(tmp_path), "--rest-port", str(free_port())]) == 2
    err = capsys.readouterr().err
    assert "no Flink cluster answers" in err and err.count("\n") == 1


def test_rescale_to_zero_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    assert main(["rescale", "--parallelism", "0", "--state-dir", str(tmp_path)]) == 2
    assert "--parallelism must be at least 1" in capsys.readouterr().err
    assert main(["rescale", "--parallelism", "2", "--fetch-parallelism", "0", "--state-dir", str(tmp_path)]) == 2
    assert "--fetch-parallelism must be at least 1" in capsys.readouterr().err


def test_rescale_moves_the_fetch_subtasks_only_when_asked():
    assert rescale_overrides(4) == ["job.parallelism=4"]
    assert rescale_overrides(4, 4) == ["job.parallelism=4", "job.fetch_parallelism=4"]


# --- the cluster shape the failover and rescale tests need (crawler/flink_cluster.py) ------------

def test_each_taskmanager_has_its_own_pid_file_and_the_first_keeps_the_old_names(tmp_path: Path):
    from crawler.flink_cluster import FlinkCluster

    cluster = FlinkCluster(tmp_path, taskmanagers=3)
    assert [d.pid_file.name for d in cluster.taskmanagers] == ["taskmanager.pid", "taskmanager-2.pid",
                                                               "taskmanager-3.pid"]
    assert len({d.log_file for d in cluster.taskmanagers}) == 3
    assert cluster.taskmanager is cluster.taskmanagers[0] and cluster.taskmanager.name == "flink-taskmanager"
    assert len(FlinkCluster(tmp_path).taskmanagers) == 1


def test_the_cluster_environment_drops_what_an_in_process_pyflink_left(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch):
    # A process that ran a local PyFlink job (a test session) carries its Python worker pool's address:
    # a TaskManager that inherited it would run its jobs' Python functions in that process.
    from crawler.flink_cluster import FlinkCluster

    left = {"PYTHON_LOOPBACK_SERVER_ADDRESS": "localhost:46747", "PYFLINK_GATEWAY_DISABLED": "true",
            "_PYFLINK_CONN_INFO_PATH": "/tmp/x", "SEMI_PERSISTENT_DIRECTORY": "/tmp",
            "_PYTHON_WORKER_MEMORY_LIMIT": "67108864", "FLINK_HOME": "/venv/pyflink",
            "FLINK_LIB_DIR": "/venv/pyflink/lib", "python": "/venv/bin/python"}
    for name, value in left.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("CRAWLER_KEEP_ME", "1")
    cluster = FlinkCluster(tmp_path)
    env = cluster.env()
    assert not set(left) & set(env), set(left) & set(env)
    assert env["CRAWLER_KEEP_ME"] == "1" and env["FLINK_CONF_DIR"] == str(cluster.conf_dir)


@pytest.mark.parametrize("kwargs, message", [
    ({"taskmanagers": 0}, "at least one TaskManager"),
    ({"settings": {"bad key: x\nother": "1"}}, "dotted words"),
])
def test_cluster_rejects_a_bad_shape(tmp_path: Path, kwargs: dict, message: str):
    from crawler.flink_cluster import FlinkCluster

    with pytest.raises(ValueError, match=message):
        FlinkCluster(tmp_path, **kwargs)


def test_cluster_settings_are_appended_after_the_template_so_they_win(tmp_path: Path):
    from crawler.flink_cluster import render_conf

    text = (render_conf(tmp_path / "conf", tmp_path, rest_port=18081,
                        settings={"jobmanager.rpc.port": "16123", "restart-strategy.fixed-delay.delay": "5 s"})
            / "config.yaml").read_text()
    template_port = text.index("port: 6123")
    assert text.index('jobmanager.rpc.port: "16123"') > template_port
    assert text.endswith('restart-strategy.fixed-delay.delay: "5 s"\n')
