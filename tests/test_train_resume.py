"""Kill-and-resume is bit-exact: a training subprocess killed with SIGKILL (or stopped by SIGTERM) and rerun ends with
the same training-state hash and the same loss curve as an uninterrupted run."""

import os, signal, subprocess, sys, textwrap, time
from pathlib import Path
import pytest

TESTS = Path(__file__).resolve().parent

WORKER = textwrap.dedent("""
    import os, sys
    os.environ["MARIN_TRACKER"] = "disabled"
    sys.path.insert(0, sys.argv[3])   # the tests folder: the slowed-down character data lives in cluster_train_steps
    from cluster_train_steps import SlowCharData
    from marin.models.transformer import LlamaConfig
    from marin.train.checkpoint import CheckpointConfig
    from marin.train.optim import OptimizerConfig
    from marin.train.trainer import Preempted, TrainConfig, final_params_hash, train

    out, delay = sys.argv[1], float(sys.argv[2])
    cfg = TrainConfig(model=LlamaConfig(vocab_size=65, seq_len=32, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64, qk_norm=True),
                      data=SlowCharData(batch_size=8, seq_len=32, delay=delay), num_train_steps=40, grad_accum=2, z_loss=1e-4,
                      optimizer=OptimizerConfig(learning_rate=3e-3, warmup=5, schedule="wsd"),
                      checkpoint=CheckpointConfig(every=5, keep_last=2), progress=False, log_every=5)
    try: train(cfg, out)
    except Preempted as e: print("PREEMPTED", e, flush=True); sys.exit(3)
    print("HASH", final_params_hash(out), flush=True)
""")


def _run(script, out, delay=0.0):
    return subprocess.run(
        [sys.executable, str(script), str(out), str(delay), str(TESTS)], capture_output=True, text=True, timeout=300
    )


def _start(script, out, delay):
    return subprocess.Popen(
        [sys.executable, str(script), str(out), str(delay), str(TESTS)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _wait_for_checkpoint(out: Path, step: int, proc, timeout=180):
    from marin.train.checkpoint import latest_checkpoint

    t = time.time()
    while time.time() - t < timeout:
        lt = latest_checkpoint(str(out / "checkpoints"))
        if lt and lt[0] >= step:
            return lt[0]
        assert proc.poll() is None, f"worker exited early: {proc.stdout.read()}"
        time.sleep(0.02)
    raise TimeoutError("no checkpoint appeared")


def _hash(res):
    assert res.returncode == 0, res.stdout + res.stderr
    return [l for l in res.stdout.splitlines() if l.startswith("HASH")][-1].split()[1]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    "An uninterrupted run: (worker script, output dir, state hash, history text)."
    d = tmp_path_factory.mktemp("resume")
    script = d / "worker.py"
    script.write_text(WORKER)
    res = _run(script, d / "ref")
    return script, _hash(res), (d / "ref" / "history.jsonl").read_text()


def test_sigkill_and_resume_is_bit_exact(reference, tmp_path):
    script, ref_hash, ref_hist = reference
    out = tmp_path / "killed"
    proc = _start(script, out, delay=0.1)
    k = _wait_for_checkpoint(out, 15, proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    from marin.train.checkpoint import latest_checkpoint

    assert latest_checkpoint(str(out / "checkpoints"))[0] < 40, "the run finished before it was killed"
    res = _run(script, out)
    assert _hash(res) == ref_hash  # parameters, optimizer state, step, RNG: identical bits
    assert (out / "history.jsonl").read_text() == ref_hist  # the same loss curve, step for step


def test_sigterm_saves_and_resumes_bit_exact(reference, tmp_path):
    script, ref_hash, ref_hist = reference
    out = tmp_path / "preempted"
    proc = _start(script, out, delay=0.1)
    _wait_for_checkpoint(out, 10, proc)
    os.kill(proc.pid, signal.SIGTERM)
    proc.wait(timeout=120)
    text = proc.stdout.read()
    assert proc.returncode == 3 and "PREEMPTED" in text, text
    from marin.train.checkpoint import latest_checkpoint

    at = latest_checkpoint(str(out / "checkpoints"))[0]
    assert 10 <= at < 40  # saved where it stopped, before the end
    assert _hash(_run(script, out)) == ref_hash
    assert (out / "history.jsonl").read_text() == ref_hist
