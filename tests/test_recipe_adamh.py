"""The completed-AdamH recipe (#52 item 2) from the command line: `marin scale --recipe completed-adamh --dry-run`
prints AdamH's settings and the arithmetic behind them, and a plan it emits trains through `marin train` unchanged."""

import json, math, subprocess
from pathlib import Path
from typer.testing import CliRunner
from marin.core.config import from_canonical
from marin.scaling.recipe import ADAMH_REFERENCE, CompletedAdamHRecipe
from marin.train.optim import OptimizerConfig
from conftest import marin_cmd


def test_scale_dry_run_prints_the_adamh_settings_and_why(lab):
    r = subprocess.run(
        marin_cmd("scale", "--flops", "1e18", "--recipe", "completed-adamh", "--dry-run", "--device-kind", "H100"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    o = CompletedAdamHRecipe().plan(1e18, vocab_size=128256).optimizer
    assert o.name == "adamh" and o.weight_decay == 0.0
    for line in (
        "recipe: completed-adamh-v1",
        (
            f"optimizer: AdamH lr={o.learning_rate:.3g} (matrices) adam_lr={o.adam_lr:.3g} (the rest) "
            f"betas=({o.beta1}, {o.beta2:.6g}) eps={o.eps:.2e} wd=0.0"
        ),
        "why (optimizer): B = 225,280 tokens/step = 1.72 B0, T = 1.809e+09 tokens = 1.29 T0; reference seed-moe-v0",
        f"lr      = {ADAMH_REFERENCE.learning_rate:g} × (B/B0)^0.5 × (T0/T)^0.3 = {o.learning_rate:.4g}",
        f"beta2   = 0.999^(B/B0) = {o.beta2:.6g}",
        "PROVISIONAL",
    ):
        assert line in r.stdout, (line, r.stdout)


def test_a_plan_trains_through_marin_train_unchanged(lab):
    from marin.train.cli import app

    cfg = lab / "adamh_plan.py"
    cfg.write_text(
        "from marin.scaling.recipe import CompletedAdamHRecipe\n"
        "config = CompletedAdamHRecipe().plan(1e11, vocab_size=512).train_config()\n"
    )
    r = CliRunner().invoke(app, ["train", "--config", str(cfg), "--steps", "4", "--name", "train/adamh-plan"])
    assert r.exit_code == 0 and "SUCCESS" in r.output, r.output
    out = Path(next(line.split("output: ", 1)[1] for line in r.output.splitlines() if line.startswith("output: ")))
    plan = CompletedAdamHRecipe().plan(1e11, vocab_size=512)
    # the run's recorded optimizer is the plan's AdamH config (only the warmup follows --steps, as for any config)
    ran = OptimizerConfig.from_dict(from_canonical(json.loads((out / "train_config.json").read_text())["optimizer"]))
    assert ran == plan.optimizer.replace(warmup=1.0), (ran, plan.optimizer)
    hist = [json.loads(x) for x in (out / "history.jsonl").read_text().splitlines()]
    assert [h["step"] for h in hist] == [0, 1, 2, 3] and all(math.isfinite(h["loss"]) for h in hist)
    assert abs(hist[1]["lr"] - plan.optimizer.learning_rate) < 1e-9  # the trainer applies the recipe's rate
