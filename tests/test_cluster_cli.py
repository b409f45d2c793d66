"""`marin cluster up` starts a real loopback Ray cluster with its own token; `marin cluster status` reads it; `marin run
--cluster ray` runs an experiment's steps on it; Ctrl-C stops it."""

import json, os, signal, socket, subprocess, sys, threading, time
from pathlib import Path
import pytest

from test_core_experiments import make_notebook

MARIN = str(Path(sys.executable).with_name("marin"))

ON_RAY_BODY = """import dataclasses, pathlib
from marin.core.executor import Step, executor_main
from marin.core.experiments import record_metrics
@dataclasses.dataclass(frozen=True)
class Point:
    i: int = 0
def square(cfg, out):
    pathlib.Path(out).mkdir(parents=True, exist_ok=True); (pathlib.Path(out) / "v.txt").write_text(str(cfg.i ** 2))
    return {"eval/v": cfg.i ** 2}
steps = [Step(f"sq/{i}", square, Point(i), resources={"cpus": 0.25}) for i in range(n)]
result = executor_main(steps, issue=issue)
record_metrics(**{"eval/sum": sum(int(pathlib.Path(result.outputs[s.output_name], "v.txt").read_text()) for s in steps)})
"""


def test_cluster_up_status_and_stop(tmp_path):
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text("a-stray-token-the-cluster-must-ignore")
    env = {**os.environ, "HOME": str(home), "JAX_PLATFORMS": "cpu"}
    for k in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_TOKEN"):
        env.pop(k, None)
    up = subprocess.Popen(
        [
            MARIN,
            "cluster",
            "up",
            "--nodes",
            "1",
            "--cpus",
            "1",
            "--resource",
            "device=1",
            "--root",
            str(tmp_path / "c"),
        ],
        stdout=subprocess.PIPE,
        stderr=open(tmp_path / "up.err", "w"),
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        exports = {}
        t = time.time()
        while len(exports) < 3 and time.time() - t < 400:
            line = up.stdout.readline()
            if not line:
                assert up.poll() is None, f"marin cluster up exited: {(tmp_path / 'up.err').read_text()[-2000:]}"
                continue
            if line.startswith("export "):
                k, v = line[7:].strip().split("=", 1)
                exports[k] = v
        assert set(exports) == {"RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH"}, exports
        # what `up` prints from here on (its nodes' forwarded logs) is drained, as a terminal would: a full pipe would
        # block its writes, and with them its SIGINT handler
        up_output: list[str] = []
        threading.Thread(target=lambda: up_output.extend(up.stdout), daemon=True).start()
        token = Path(exports["RAY_AUTH_TOKEN_PATH"])
        assert token.is_file() and oct(token.stat().st_mode & 0o777) == "0o600"
        assert token.read_text() not in json.dumps(exports)  # the token's place is printed, never the token

        st = subprocess.run(
            [MARIN, "cluster", "status", "--json"], env={**env, **exports}, capture_output=True, text=True, timeout=120
        )
        assert st.returncode == 0, st.stderr[-2000:]
        s = json.loads(st.stdout)
        workers = [n for n in s["nodes"] if n["labels"].get("marin-node") == "node0"]
        assert (
            len(workers) == 1
            and workers[0]["alive"]
            and workers[0]["resources"]["device"] == 1
            and workers[0]["resources"]["CPU"] == 1
        )
        assert s["total"]["device"] == 1 and s["total"]["CPU"] == 1  # the head does no work

        # an experiment through `marin run --cluster ray`: its steps run as Ray tasks on that cluster, and the ledger
        # records their node but never the cluster's address
        lab = tmp_path / "lab"
        nb = make_notebook(lab / "experiments_nb" / "on_ray.ipynb", ON_RAY_BODY, params='issue = "#8"\nn = 3')
        run_env = {
            **env,
            **exports,
            "MARIN_PREFIX": str(lab / "store"),
            "MARIN_REPORTS_DIR": str(lab / "reports"),
            "MARIN_TRACKER": "disabled",
        }
        r = subprocess.run(
            [MARIN, "run", str(nb), "--cluster", "ray", "-p", "n", "2"],  # a parameter overridden (the notebook says 3)
            env=run_env,
            capture_output=True,
            text=True,
            timeout=600,
            cwd=lab,
        )
        assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
        from marin.core.ledger import Ledger

        led = Ledger(str(lab / "store" / "ledger"))
        steps = led.sql(
            "SELECT step, status, hardware->>'ray_node_id' AS node, parent_run_id FROM runs WHERE kind = 'step' ORDER BY step"
        )
        assert list(steps.step) == [f"sq/{i}" for i in range(2)] and set(steps.status) == {"SUCCESS"}, steps
        assert (
            steps.node.str.len().min() == 56 and steps.parent_run_id.notna().all()
        )  # ran on a Ray node, linked to the experiment run
        exp = led.sql("SELECT status, metrics FROM runs WHERE kind = 'experiment'")
        assert list(exp.status) == ["SUCCESS"] and json.loads(exp.metrics[0])["eval/sum"] == 0 + 1
        assert exports["RAY_ADDRESS"] not in led.sql("SELECT * FROM records").to_json(
            date_format="iso"
        )  # the address is in no record

        up.send_signal(signal.SIGINT)
        assert up.wait(timeout=120) == 0
        assert "cluster stopped" in (tmp_path / "up.err").read_text()
        host, port = exports["RAY_ADDRESS"].rsplit(":", 1)
        with pytest.raises(OSError):
            socket.create_connection((host, int(port)), timeout=2).close()  # the head is gone
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)
