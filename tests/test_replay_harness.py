"""The replay harness itself (tests/replay.py): real cases through a child process, and its check refusing each kind
of bad outcome (a traceback, a wrong code, a missing text, a timeout, a memory peak, a step left RUNNING)."""

import json
import pytest
from replay import Case, Replayed, bytes_file, running_steps


def write_status(d):
    bytes_file(d / "store" / "data" / "x-123" / ".executor_status.json", json.dumps({"status": "RUNNING"}).encode())


CASES = [
    Case("usage/unknown-option", argv=("runs", "list", "--bogus"), code=2, says=("No such option: --bogus",)),
    Case("runs/sql-on-an-empty-lab", argv=("runs", "sql", "select 1 as one"), expect="ok", says=("one",)),
    Case("harness/left-running", argv=("runs", "list"), make=write_status, expect="ok"),
]


@pytest.mark.parametrize("case", CASES[:2], ids=lambda c: c.name)
def test_replay(case, replayed):
    replayed.check(case)


def test_the_child_sees_a_step_left_running(replayed):
    with pytest.raises(AssertionError, match="left steps RUNNING"):
        replayed.check(CASES[2])


GOOD = dict(
    name="c", code=2, crash=None, timeout=False, seconds=0.1, rss_mb=10, output="error: bad field x", running=[]
)


@pytest.mark.parametrize(
    "change, says",
    [
        (dict(output="Traceback (most recent call last):\nerror: bad field x"), "Traceback"),
        (dict(code=1), "exit code 1"),
        (dict(output="error: something"), "does not say"),
        (dict(timeout=True), "ran past"),
        (dict(rss_mb=5000), "peak memory"),
        (dict(running=["data/x-1"]), "RUNNING"),
        (dict(crash="Traceback ... MemoryError"), "crashed"),
    ],
)
def test_check_refuses_each_bad_outcome(tmp_path, change, says):
    case = Case("c", argv=("x",), code=2, says=("bad field x",))
    Replayed({"c": GOOD}, tmp_path, [case], "").check(case)  # the good result passes
    with pytest.raises(AssertionError, match=says):
        Replayed({"c": {**GOOD, **change}}, tmp_path, [case], "").check(case)


def test_running_steps_reads_status_files(tmp_path):
    write_status(tmp_path)
    assert running_steps(tmp_path / "store") == ["data/x-123"]
    assert running_steps(tmp_path / "nowhere") == []
