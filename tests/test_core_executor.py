"Executor: caching, selective reruns, racing processes, kill -9, failures, ledger queries."

import json, os, signal, socket, subprocess, sys, time
from pathlib import Path
import pytest
from marin.core import storage
from marin.core.executor import Executor, Step, StepFailed, read_status, LEASE_FILE, SUCCESS, FAILED, RUNNING
from marin.core.ledger import Ledger
from conftest import marin_cmd
import steps_for_tests as T

HERE = Path(__file__).parent


def lines(p) -> list[str]:
    return Path(p).read_text().splitlines() if Path(p).exists() else []


def test_dag_runs_once_then_cached(lab):
    log = lab / "log.txt"
    ex = Executor(str(lab / "store"), verbose=False)
    src, a, b = T.dag(str(log))
    r1 = ex.run([a, b])
    assert len(r1.ran) == 3 and len(lines(log)) == 3
    r2 = ex.run([a, b])
    assert r2.ran == [] and len(r2.cached) == 3 and len(lines(log)) == 3, "second run must be a no-op"
    assert storage.read_json(storage.join(r1[a], "scaled.json")) == [0, 2, 4, 6, 8]


def test_changing_one_versioned_field_reruns_exactly_affected(lab):
    log = lab / "log.txt"
    ex = Executor(str(lab / "store"), verbose=False)
    ex.run(list(T.dag(str(log)))[1:])
    Path(log).write_text("")
    # change scale-b's factor: only scale-b reruns
    src, a, b = T.dag(str(log), f2=7)
    r = ex.run([a, b])
    assert r.ran == [b.output_name] and lines(log) == [f"scale7 {os.getpid()}"]
    # change the source's n: the source and both dependents rerun
    Path(log).write_text("")
    src, a, b = T.dag(str(log), n=6, f2=7)
    r = ex.run([a, b])
    assert sorted(r.ran) == sorted([src.output_name, a.output_name, b.output_name])
    # a non-versioned change (sleep) reruns nothing
    r = ex.run(list(T.dag(str(log), n=6, f2=7, sleep_s=0.01))[1:])
    assert r.ran == []


def test_two_processes_racing_run_each_step_once(lab):
    log = lab / "log.txt"
    cmd = [sys.executable, str(HERE / "steps_for_tests.py"), str(lab / "store"), str(log), "1.5", ""]
    procs = [subprocess.Popen(cmd, cwd=HERE, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [json.loads(p.communicate(timeout=120)[0].strip().splitlines()[-1]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    runs = lines(log)
    assert sorted(l.split()[0] for l in runs) == ["scale2", "scale3", "source"], (
        f"each step must run exactly once: {runs}"
    )
    statuses = [v for o in outs for v in o.values()]
    assert statuses.count(SUCCESS) == 3 and statuses.count("cached") == 3


def test_kill_9_during_step_leaves_it_not_done_and_rerun_completes(lab):
    log, marker = lab / "log.txt", lab / "started"
    store = lab / "store"
    cmd = [sys.executable, str(HERE / "steps_for_tests.py"), str(store), str(log), "60", str(marker)]
    p = subprocess.Popen(
        cmd, cwd=HERE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ, LEASE="600")
    )
    t0 = time.time()
    while not marker.exists():
        assert time.time() - t0 < 60 and p.poll() is None, "step did not start"
        time.sleep(0.05)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    src, a, b = T.dag(str(log), sleep_s=0.0, marker="")
    ex = Executor(str(store), verbose=False)
    st = read_status(ex.output_path(src))
    assert st["status"] == RUNNING, "a killed step must not be marked done"
    assert Path(ex.output_path(src), LEASE_FILE).exists(), "its lease is left behind (600 s to live)"
    assert not Path(ex.output_path(src), "numbers.json").exists()
    # same host, dead pid: the lease is taken over at once, without waiting for it to expire (600 s)
    expires = storage.read_json(storage.join(ex.output_path(src), LEASE_FILE))["expires_at"]
    r = ex.run([a, b])
    assert time.time() < expires and read_status(ex.output_path(src))["status"] == SUCCESS
    assert storage.read_json(storage.join(r[b], "scaled.json")) == [0, 3, 6, 9, 12]
    led = Ledger(str(store / "ledger")).sql(
        "SELECT step, status, error FROM runs WHERE step = 'source' ORDER BY started_at"
    )
    assert list(led.status) == [FAILED, SUCCESS], "the killed attempt stays visible in the ledger, closed as FAILED"
    assert led.error[0].startswith("lease taken over"), led.error[0]


def test_expired_lease_from_another_host_is_taken_over(lab):
    ex = Executor(str(lab / "store"), verbose=False, lease_seconds=3)
    src, a, b = T.dag(str(lab / "log.txt"))
    out = ex.output_path(src)
    expires = time.time() + 1.0
    storage.write_json(
        storage.join(out, LEASE_FILE), {"owner": "x", "host": "elsewhere", "pid": 1, "expires_at": expires}
    )
    ex.run([src])
    assert time.time() >= expires, "must wait for the live lease, then take it over"
    assert read_status(out)["status"] == SUCCESS


def test_failing_step_recorded_and_dependents_not_run(lab):
    def bad(cfg, out):
        raise RuntimeError("disk on fire")

    ex = Executor(str(lab / "store"), verbose=False)
    broken = Step("broken", bad, {"v": 1})
    child = Step("child", T.scale, T.ScaleConfig(numbers=broken))
    with pytest.raises(StepFailed, match="broken"):
        ex.run([child])
    st = read_status(ex.output_path(broken))
    assert st["status"] == FAILED and "disk on fire" in st["traceback"]
    assert read_status(ex.output_path(child)) is None
    rec = ex.ledger.sql("SELECT * FROM runs WHERE step = 'broken'")
    assert rec.status[0] == FAILED and "RuntimeError: disk on fire" in rec.traceback[0] and rec.git_commit[0] != ""
    assert ex.ledger.sql("SELECT count(*) AS n FROM runs WHERE step = 'child'").n[0] == 0


def test_dry_run_and_run_only(lab, capsys):
    log = lab / "log.txt"
    ex = Executor(str(lab / "store"))
    src, a, b = T.dag(str(log))
    ex.run([a, b], dry_run=True)
    out = capsys.readouterr().out
    assert "3 to run" in out and ex.output_path(a) in out and not log.exists()
    ex.run([a, b], run_only="scale-a")
    assert sorted(l.split()[0] for l in lines(log)) == ["scale2", "source"]
    ex.run([a, b], dry_run=True)
    assert "1 to run, 2 cached" in capsys.readouterr().out
    with pytest.raises(ValueError, match="matches no step"):
        ex.run([a, b], run_only="nothing-like-this")


def test_marin_runs_sql_over_three_runs(lab):
    ex = Executor(str(lab / "store"), verbose=False)
    ex.run(list(T.dag(str(lab / "log.txt")))[1:])
    q = "SELECT step, status FROM runs WHERE kind = 'step' ORDER BY step"
    r = subprocess.run(marin_cmd("runs", "sql", q), capture_output=True, text=True, env=os.environ)
    assert r.returncode == 0, r.stderr
    body = r.stdout.split("\n")
    assert sum("SUCCESS" in l for l in body) == 3 and any("scale-b" in l for l in body)
    r = subprocess.run(marin_cmd("runs", "sql", "SELEC nonsense"), capture_output=True, text=True, env=os.environ)
    assert r.returncode == 2 and r.stderr.startswith("error: SQL error") and "Traceback" not in r.stderr
    r = subprocess.run(marin_cmd("runs", "list", "--kind", "step"), capture_output=True, text=True, env=os.environ)
    assert r.returncode == 0 and r.stdout.count("SUCCESS") == 3
