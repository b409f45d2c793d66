"A scaling run end to end: `marin scale --run` trains a plan as a cached executor step; fits read it from the ledger."

import dataclasses, json, os
import pytest
from typer.testing import CliRunner
from marin.core.ledger import Ledger
from marin.scaling.cli import app
from marin.scaling.recipe import TinyCpuRecipe
from marin.scaling.sweep import IsoFlopSweep, scaling_step
from marin.scaling.fits import sweep_runs, MissingRuns, fit_optimal_scaling
from marin.train.trainer import SyntheticDataConfig


def test_scale_run_then_ledger(tmp_path, monkeypatch):
    prefix = str(tmp_path / "store")
    monkeypatch.setenv("MARIN_PREFIX", prefix)
    args = ["scale", "--flops", "3e9", "--run", "--data", "synthetic", "--prefix", prefix]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "SUCCESS" in r.output and "vs budget" in r.output
    # the run is in the ledger with its scaling numbers; FLOPs within 5% of the budget
    df = Ledger(os.path.join(prefix, "ledger")).sql(
        "select step, metrics from runs where step like 'scaling/cli/%' and status = 'SUCCESS'"
    )
    assert len(df) == 1
    m = json.loads(df.metrics[0])
    assert abs(m["scaling/flops"] / 3e9 - 1) < 0.05 and m["scaling/loss"] > 0 and m["scaling/budget"] == 3e9
    # a second invocation is a cache hit
    r2 = CliRunner().invoke(app, args)
    assert r2.exit_code == 0 and "cached" in r2.output

    # sweep_runs finds the run by its step; a sweep whose runs never ran is a clear error naming them
    plan = TinyCpuRecipe().plan(3e9, vocab_size=512)
    data = SyntheticDataConfig(vocab_size=512)
    step = scaling_step(
        plan,
        data,
        sweep="cli",
        eval_data=(("synthetic", data.replace(batch_size=plan.batch_size, seq_len=plan.seq_len, seed=1)),),
        progress=True,
        log_every=50,
    )
    runs = sweep_runs([step], Ledger(os.path.join(prefix, "ledger")))
    assert len(runs) == 1 and runs.loss[0] == pytest.approx(m["scaling/loss"])
    with pytest.raises(ValueError, match="fits need runs at >= 3 budgets"):
        fit_optimal_scaling(runs)
    sweep = IsoFlopSweep(TinyCpuRecipe(), budgets=(3e10, 1e11, 3e11), vocab_size=512, sizes_per_budget=5, spread=3.0)
    with pytest.raises(MissingRuns, match="Run the sweep first"):
        sweep_runs(sweep.steps(data), Ledger(os.path.join(prefix, "ledger")))


def test_dry_run_cli_reports_flops_and_memory():
    r = CliRunner().invoke(app, ["scale", "--flops", "3e20", "--dry-run", "--device-kind", "H100"])
    assert r.exit_code == 0, r.output
    assert "training FLOPs (exact): 3.0000" in r.output and "per device" in r.output and "H100" in r.output
    r = CliRunner().invoke(
        app, ["scale", "--flops", "1e18", "--dry-run", "--device-kind", "H100", "--recipe", "no.such:Recipe"]
    )
    assert r.exit_code == 2 and "--recipe" in r.output
