"""Every rung the recipe emits runs through `marin train` unchanged (#52 item 5): `marin scale --flops X --emit FILE`
writes the plan's optimizer settings, its slice (mesh, grad_accum), its data and its evaluation and checkpoint cadence
as the YAML `marin train --config FILE` reads back as the same config; the train CLI's own memory estimate agrees that
it fits the slice (it refused the 1e21 rung before the estimates were one); and a CPU-sized rung trains from its file."""

import json, math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from marin.cli import app
from marin.scaling.cli import _plan_for, run_cadence, rung_config
from marin.train.cli import estimate_memory, load_train_config

runner = CliRunner()


@pytest.mark.parametrize("recipe", ["completed-adamh", "compute-optimal"])
def test_rungs_1e18_to_1e23_emit_configs_marin_train_reads_back(tmp_path, recipe):
    for flops in (1e18, 1e19, 1e20, 1e21, 1e22, 1e23):
        f = tmp_path / f"{flops:.0e}.yaml"
        r = runner.invoke(app, ["scale", "--flops", f"{flops:g}", "--recipe", recipe, "--emit", str(f)])
        assert r.exit_code == 0, r.output
        cfg = load_train_config(str(f))
        plan, V = _plan_for(flops, recipe, 0.0, 0, False, "synthetic")
        want, choice = rung_config(plan, "synthetic", V)
        assert cfg == want and cfg.optimizer == plan.optimizer  # the recipe's optimizer settings, unchanged
        assert (recipe == "completed-adamh") == (cfg.optimizer.name == "adamh")
        every = run_cadence(plan.num_steps)
        assert cfg.eval_every == cfg.checkpoint.every == every and 100 <= every <= 1000 and cfg.eval_data
        t = choice.target
        assert cfg.mesh.devices == t.devices and plan.batch_size % cfg.grad_accum == 0
        assert f"--target {t.name} --dry-run" in r.output and f"--target {t.name}" in f.read_text()
        # the estimate marin train's dry run prints is the one that chose the slice: it fits there
        assert estimate_memory(cfg, t.devices, "tpu").total <= 0.9 * t.hbm_bytes, (flops, t.name)


def test_a_cpu_rung_trains_from_its_file(lab, monkeypatch):
    monkeypatch.setenv("MARIN_TRACKER", "disabled")
    f = lab / "rung.yaml"
    # 3e8: 40 steps, evaluated and checkpointed every 2 (3e9: 132 steps, every 5; the same cadence rule)
    r = runner.invoke(app, ["scale", "--flops", "3e8", "--recipe", "tiny-cpu-adamh", "--emit", str(f)])
    assert r.exit_code == 0 and "marin train --config" in r.output, r.output
    cfg = load_train_config(str(f))
    r = runner.invoke(app, ["train", "--config", str(f), "--name", "train/rung"])
    assert r.exit_code == 0, r.output
    out = Path(next(line.split("output: ", 1)[1] for line in r.output.splitlines() if line.startswith("output: ")))
    history = [json.loads(x) for x in (out / "history.jsonl").read_text().splitlines()]
    assert len(history) == cfg.num_train_steps and all(math.isfinite(h["loss"]) for h in history)  # random tokens
    evals = [json.loads(x) for x in (out / ".tracking" / "metrics.jsonl").read_text().splitlines()]
    steps = [e["step"] for e in evals if "eval/synthetic/loss" in e]
    assert steps[:2] == [cfg.eval_every, 2 * cfg.eval_every]  # evaluated at the emitted cadence
    ckpts = sorted(int(p.name.split("_")[-1]) for p in (out / "checkpoints").iterdir() if p.name.startswith("step_"))
    assert ckpts and all(s % cfg.checkpoint.every == 0 or s == cfg.num_train_steps for s in ckpts)
