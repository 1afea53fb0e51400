"""Each protection, proven: a test-only lab attacks its own sandbox and must fail.

The cases run in one warm parent process (see _warm_parent.py), exactly as the
worker runs labs: fork, sandbox, run, report.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from labs.runtime.limits import OUTPUT_LIMIT_BYTES
from labs.runtime.probe import SECRET_MASK
from tests.unit.labs.runtime._warm_parent import WarmParent

ROOT_USER = os.geteuid() == 0
CASES: dict[str, dict[str, Any]] = {
    "ok": {"params": {"mode": "ok"}},
    "network": {"params": {"mode": "network"}},
    "unix_socket": {"params": {"mode": "unix_socket"}},
    "read_db": {"params": {"mode": "read_db"}},
    "read_secret": {"params": {"mode": "read_secret"}},
    "write_outside": {"params": {"mode": "write_outside"}},
    "scan_memory": {"params": {"mode": "scan_memory"}},
    "setsid_escape": {"params": {"mode": "setsid_escape"}},
    "list_processes": {"params": {"mode": "list_processes"}},
    "fork_bomb": {"lab": "sandbox-probe-slow", "params": {"mode": "fork_bomb"}},
    "memory": {"params": {"mode": "memory"}},
    "spin": {"params": {"mode": "spin"}},
    "flood": {"params": {"mode": "flood", "megabytes": 100}},
    "big_result": {"params": {"mode": "big_result", "megabytes": 5}},
    # Parameters far larger than a socket message (~200 KiB) reach the child whole.
    "big_params": {
        "lab": "block-quantize",
        "params": {"distribution": "custom", "shape": [15, 4000], "values": [0.123456789] * 60_000},
    },
    # The same lab again: the spare made after big_params runs it, figures and all.
    "quantize_ahead": {"lab": "block-quantize", "params": {"shape": [64, 64]}},
    "cancel": {
        "lab": "sandbox-probe-slow",
        "params": {"mode": "sleep", "seconds": 20},
        "stop_after": 0.5,
    },
    "lost": {
        "lab": "sandbox-probe-slow",
        "params": {"mode": "sleep", "seconds": 20},
        "own_for": 0.3,
    },
    # Spare children (labs.runtime.spare): after a run, the fork server prepares one for
    # the same sandbox settings. The run above had other settings (another time limit):
    # the next one gets a child of its own, the ones after it the spare made meanwhile.
    "mark": {"params": {"mode": "leave_mark"}},
    "mark_again": {"params": {"mode": "leave_mark"}},
    "ok_ahead": {"params": {"mode": "ok"}},
    "processes_ahead": {"params": {"mode": "list_processes"}},
    "unix_socket_new": {"params": {"mode": "unix_socket"}, "new_unix_socket": True},
}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[str, Any]]]:
    data_dir = tmp_path_factory.mktemp("sandbox") / "data"
    data_dir.mkdir()
    db = data_dir / "lowbit.db"
    db.write_text("the database")
    secret = "sandbox-test-secret-" + secrets.token_hex(8)
    escape_name = "lowbit-" + secrets.token_hex(4)
    parent = WarmParent(data_dir, secret)
    targets = {
        "network": f"127.0.0.1:{parent.port}",
        "unix_socket": parent.unix_socket,
        "read_db": str(db),
        "read_secret": secret,
        "write_outside": str(data_dir),
        # Masked (see probe._scan_memory): the probe's own copy of the target is no hit.
        "scan_memory": bytes(b ^ SECRET_MASK for b in secret.encode()).hex(),
        "setsid_escape": escape_name,
    }
    # The warm parent looks for the daemon among the host's processes after the run.
    extra = {"setsid_escape": {"escape_name": escape_name}}
    try:
        yield {
            name: parent.run(
                {
                    **case,
                    **extra.get(name, {}),
                    "params": {**case["params"], "target": targets[name]},
                }
                if name in targets
                else case
            )
            for name, case in CASES.items()
        }
    finally:
        parent.close()


def probe(outcomes: dict[str, dict[str, Any]], name: str) -> dict[str, Any]:
    out = outcomes[name]
    assert out["status"] == "succeeded", out
    return out["result"]


def test_a_normal_run_records_every_protection(outcomes: dict[str, dict[str, Any]]) -> None:
    out = outcomes["ok"]
    assert out["status"] == "succeeded"
    sandbox = out["sandbox"]
    names = {
        "network",
        "filesystem",
        "tmpdir",
        "hidden_paths",
        "memory",
        "cpu_time",
        "wall_time",
        "file_size",
        "processes",
        "environment",
        "secrets",
        "user",
        "no_new_privs",
        "output",
        "process_tree",
        "process_view",
    }
    assert names <= set(sandbox)
    for name, p in sandbox.items():
        assert isinstance(p["enabled"], bool) and p["detail"], name
    if ROOT_USER:  # the machine the suite runs on allows every protection
        off = {n: p["detail"] for n, p in sandbox.items() if not p["enabled"]}
        assert off == {}, off
        assert out["result"]["uid"] != 0 and out["result"]["cwd"] == "/tmp"
    assert [k for k, _ in out["events"]] == ["log", "table", "metric", "progress"]


def test_no_network_even_to_localhost(outcomes: dict[str, dict[str, Any]]) -> None:
    r = probe(outcomes, "network")
    assert r["blocked"], r["detail"]


def test_host_unix_sockets_are_masked(outcomes: dict[str, dict[str, Any]]) -> None:
    r = probe(outcomes, "unix_socket")
    assert r["blocked"], r["detail"]
    if ROOT_USER:
        # "10 host unix socket(s)" contains "0 host unix socket(s)": match the number whole.
        detail = outcomes["ok"]["sandbox"]["hidden_paths"]["detail"]
        assert not re.search(r"(?<!\d)0 host unix socket", detail), detail


def test_the_database_file_cannot_be_read(outcomes: dict[str, dict[str, Any]]) -> None:
    r = probe(outcomes, "read_db")
    assert r["blocked"], r["detail"]


def test_the_secret_key_is_nowhere_to_be_found(outcomes: dict[str, dict[str, Any]]) -> None:
    r = probe(outcomes, "read_secret")
    assert r["blocked"], r["detail"]


def test_no_credential_is_anywhere_in_the_lab_s_memory(
    outcomes: dict[str, dict[str, Any]],
) -> None:
    """The worker holds the secret key, and a database and a Redis password (its
    settings, engine and queue pool): none may be in the lab process's address space."""
    r = probe(outcomes, "scan_memory")
    assert r["blocked"], r["detail"]
    assert outcomes["ok"]["sandbox"]["secrets"]["enabled"]


def test_a_setsid_daemon_dies_with_the_run(outcomes: dict[str, dict[str, Any]]) -> None:
    out = outcomes["setsid_escape"]
    assert out["status"] == "succeeded", out
    assert out["survivors"] == [], "a daemon the lab left outlived its run"
    assert outcomes["ok"]["sandbox"]["process_tree"]["enabled"]


def test_the_lab_sees_only_its_own_processes(outcomes: dict[str, dict[str, Any]]) -> None:
    r = probe(outcomes, "list_processes")
    assert r["blocked"], r["detail"]


def test_writes_outside_the_temp_dir_fail(outcomes: dict[str, dict[str, Any]]) -> None:
    r = probe(outcomes, "write_outside")
    assert r["blocked"], r["detail"]
    assert "writable" in r["detail"]  # and its own temp dir works


def test_a_fork_bomb_hits_the_process_limit(outcomes: dict[str, dict[str, Any]]) -> None:
    r = probe(outcomes, "fork_bomb")
    assert r["blocked"], r["detail"]
    forks = int(r["detail"].split()[0])
    assert forks < 64  # RLIMIT_NPROC


def test_allocating_past_the_memory_limit_fails_with_reason_memory(
    outcomes: dict[str, dict[str, Any]],
) -> None:
    out = outcomes["memory"]
    assert out["status"] == "failed" and out["reason"] == "memory"
    assert "out of memory" in out["error"] and "256 MiB" in out["error"]


def test_a_busy_loop_is_killed_at_the_time_limit(outcomes: dict[str, dict[str, Any]]) -> None:
    out = outcomes["spin"]
    assert out["status"] == "timed_out" and out["reason"] == "time"
    assert 2.0 <= out["seconds"] < 6.0


def test_printing_100_mb_is_capped_and_flagged(outcomes: dict[str, dict[str, Any]]) -> None:
    out = outcomes["flood"]
    assert out["status"] == "succeeded"
    stored = sum(len(json.dumps(d)) for k, d in out["events"] if k == "log")
    assert OUTPUT_LIMIT_BYTES <= stored < OUTPUT_LIMIT_BYTES + 10_000
    assert out["sandbox"]["output"]["truncated"] is True
    notices = [d for k, d in out["events"] if k == "notice"]
    assert notices and notices[0]["code"] == "output_truncated"


def test_parameters_larger_than_a_socket_message_run(
    outcomes: dict[str, dict[str, Any]],
) -> None:
    """Before, the job went to the fork server as one socket message: a large request
    failed with EMSGSIZE, and the server was killed and restarted with every run on it."""
    out = outcomes["big_params"]
    assert out["status"] == "succeeded", out["error"]
    assert out["result"]["numel"] == 60_000


def test_a_result_over_the_limit_says_so(outcomes: dict[str, dict[str, Any]]) -> None:
    """Not "exited with code 0 without a result": the learner learns the size."""
    out = outcomes["big_result"]
    assert out["status"] == "failed", out
    assert "result is 5,242,9" in out["error"] and "over the" in out["error"], out["error"]
    assert "without a result" not in out["error"]


def test_cancel_stops_the_child(outcomes: dict[str, dict[str, Any]]) -> None:
    out = outcomes["cancel"]
    assert out["status"] == "cancelled" and out["seconds"] < 3


def test_a_run_taken_away_from_the_worker_is_stopped(outcomes: dict[str, dict[str, Any]]) -> None:
    out = outcomes["lost"]
    assert out["status"] == "lost" and out["seconds"] < 3


def ahead(out: dict[str, Any]) -> bool:
    """Whether the run's child was a spare, sandboxed before the job arrived."""
    return bool(out["environment"]["sandbox_ready_ahead"])


def test_a_spare_runs_the_next_job_with_every_protection_a_fresh_child_has(
    outcomes: dict[str, dict[str, Any]],
) -> None:
    fresh, spare = outcomes["ok"], outcomes["ok_ahead"]
    assert not ahead(fresh) and ahead(spare)
    assert spare["status"] == "succeeded", spare
    enabled = {name: p["enabled"] for name, p in fresh["sandbox"].items()}
    assert {name: p["enabled"] for name, p in spare["sandbox"].items()} == enabled
    assert spare["result"]["uid"] == fresh["result"]["uid"]
    assert spare["result"]["cwd"] == fresh["result"]["cwd"]
    assert [k for k, _ in spare["events"]] == [k for k, _ in fresh["events"]]


def test_a_spare_is_pid_1_of_its_own_pid_namespace(outcomes: dict[str, dict[str, Any]]) -> None:
    out = outcomes["processes_ahead"]
    assert ahead(out)
    r = probe(outcomes, "processes_ahead")
    assert r["blocked"], r["detail"]
    assert "(this one is 1)" in r["detail"]
    assert out["sandbox"]["process_tree"]["enabled"]
    assert "PID namespace" in out["sandbox"]["process_tree"]["detail"]


def test_no_run_finds_anything_an_earlier_run_left(outcomes: dict[str, dict[str, Any]]) -> None:
    # "mark" followed a run with other sandbox settings: no spare fitted it.
    assert not ahead(outcomes["mark"]) and ahead(outcomes["mark_again"])
    for name in ("mark", "mark_again"):
        r = probe(outcomes, name)
        assert r["blocked"], r["detail"]  # no mark in memory, environment or /tmp
    assert probe(outcomes, "mark")["detail"] != probe(outcomes, "mark_again")["detail"]


def test_a_unix_socket_made_after_the_spare_is_masked_all_the_same(
    outcomes: dict[str, dict[str, Any]],
) -> None:
    out = outcomes["unix_socket_new"]
    assert not ahead(out)  # the host changed since the spare was sandboxed: a fresh child
    r = probe(outcomes, "unix_socket_new")
    assert r["blocked"], r["detail"]


def test_a_lab_run_by_a_spare_streams_its_tables_metrics_and_figures(
    outcomes: dict[str, dict[str, Any]],
) -> None:
    out = outcomes["quantize_ahead"]
    assert out["status"] == "succeeded", out
    assert ahead(out)
    kinds = [k for k, _ in out["events"]]
    assert {"table", "metric", "plot"} <= set(kinds)
    plots = [d for k, d in out["events"] if k == "plot"]
    assert len(plots) == 4 and all(p["svg"].startswith("<svg") for p in plots)
    assert out["result"]["shape"] == [64, 64]
