"""Where a small training run's wall time goes, around the compiled step (issue #22).

At the `shakespeare_char` shape (the `nano` preset: 4 layers, 4 heads, width 128, context 64, batch 12) this splits
one real `marin.train.trainer.train` run into:

- compile: the first step (train step compile) and the evaluation step's compile, as the run itself reports them;
- bare step: the jitted `(state, batch) -> (state, metrics)` alone, in a loop over batches already on the device,
  one sync at the end (fwd + bwd + AdamW: the floor the trainer can reach);
- data loading: `loader.batch(step)` + `check_batch` + `device_batch` (host batch to device arrays);
- metric transfer: the same step loop with the metrics fetched to the host after every step (a per-step sync),
  minus the bare loop;
- logging: `History.record`, `DivergenceCheck`, the progress bar and `train_metrics` per step;
- tracking: `TrackedRun.log` (wandb offline) of the records the run logs;
- evaluation: the run's evaluations (`eval_every`, `eval_batches`), timed alone;
- checkpointing: the run's saves (the blocking part) and the final wait;
- Python between steps: the run's steady-state wall minus all of the above.

Each part is timed alone, in this process, next to a real `train` run of the same config (so the shares compare
under the same load). The run's wall per step (`throughput/wall_s` less compile and evaluation) over the bare step
is the ratio issue #22 bounds by 1.15.

    .venv/bin/python bench/train_overhead.py [--steps 500] [--eval-batches 100] [--matmul-dtype bfloat16] [--marin-from DIR]

`--matmul-dtype bfloat16` is what `shakespeare_char` runs where the CPU multiplies bfloat16 in hardware.

`--marin-from DIR` imports `marin` from another tree (`git archive REV marin | tar -x -C DIR`): the "before"."""

import argparse, inspect, os, sys, tempfile, time

from _steal import cpu_s

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
if "--marin-from" in sys.argv:
    _dir = sys.argv[sys.argv.index("--marin-from") + 1]
    sys.meta_path = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
    sys.path.insert(0, _dir)
import jax
import marin
from marin.train.cli import PRESETS
from marin.train import trainer as T


def config(steps: int, eval_batches: int, eval_every: int, ckpt_every: int, matmul_dtype: str = ""):
    base = PRESETS["nano"]()
    return base.replace(
        model=base.model.replace(matmul_dtype=matmul_dtype) if matmul_dtype else base.model,
        num_train_steps=steps,
        eval_batches=eval_batches,
        eval_every=eval_every,
        checkpoint=base.checkpoint.replace(every=ckpt_every),
        progress=False,
        tracker="offline",
    )


def timed(fn, n: int = 1) -> float:
    t = time.perf_counter()
    for i in range(n):
        fn(i)
    return time.perf_counter() - t


_BARE: dict = {}


def bare_step(cfg, steps: int, fetch: bool) -> tuple[float, float]:
    """(wall s, CPU s) of `steps` train steps on batches already on the device, after a compile (made once per
    process); `fetch`: the metrics are fetched to the host after every step."""
    if "setup" not in _BARE:
        setup = T.setup_training(cfg)
        state, batches = setup.init_state(), [setup.batch(i) for i in range(64)]
        state, m = setup.step(state, batches[0])
        jax.block_until_ready((state, m))
        _BARE.update(setup=setup, state=state, batches=batches)
    setup, state, batches = _BARE["setup"], _BARE["state"], _BARE["batches"]
    t, c = time.perf_counter(), cpu_s()
    for i in range(steps):
        state, m = setup.step(state, batches[i % 64])
        if fetch:
            jax.device_get(m)
    jax.block_until_ready((state, m))
    _BARE["state"] = state
    return time.perf_counter() - t, cpu_s() - c


def host_parts(cfg, steps: int, out: str) -> dict:
    "Data loading, logging, tracking, evaluation and checkpointing of a `steps`-step run, each timed alone."
    setup = T.setup_training(cfg)
    loader, mesh = setup.loader, setup.mesh
    data = timed(
        lambda i: T.device_batch(
            (T.check_batch(b := loader.batch(i), cfg.model.vocab_size, i), b)[1], mesh, cfg.grad_accum, cfg.mesh.rules
        ),
        steps,
    )
    state = setup.init_state()
    state, m = setup.step(state, setup.batch(0))
    m = {k: float(v) for k, v in jax.device_get(m).items()}
    run = T.start_run_tracking(cfg, out, True)
    history = T.History(os.path.join(out, "history.jsonl"), 0, True)
    tp = T.Throughput()
    quiet = cfg.replace(eval_every=0, checkpoint=cfg.checkpoint.replace(every=0))  # no periodic eval/save here
    disabled = T.start_run_tracking(cfg.replace(tracker="disabled"), os.path.join(out, "quiet"), True)
    logger = T.MetricsLogger(quiet, loader, disabled, tp, 1e12)
    bar = T.progress_bar(quiet, 0, True)
    if hasattr(T, "TrainHooks"):  # the trainer before #51's hooks: a fixed record of them
        saver0 = T.Checkpointer(quiet, T.CheckpointManager(os.path.join(out, "unused"), quiet.checkpoint), history)
        hooks = T.TrainHooks(
            history, T.DivergenceCheck(quiet), tp, logger, T.Evaluator(quiet, {}, None, disabled), saver0, bar
        )
        with_state = "state" in inspect.signature(hooks.after_step).parameters  # the trainer before #22 passed it
        log_step = lambda i: hooks.after_step(i, time.perf_counter(), m, *([state] if with_state else []))
    else:  # the metrics hooks the loop runs after each step
        per_step = [history, T.DivergenceCheck(quiet), T.ProgressHook(bar, quiet.log_every, steps), logger]

        def log_step(i):
            tp.step_done(time.perf_counter())
            for h in per_step:
                if T.hook_due(h, i + 1, steps):
                    h(i + 1, metrics=m)

    logging = timed(log_step, steps)
    n_logs = steps // cfg.log_every + (steps % cfg.log_every != 0)
    tracking = timed(lambda i: run.log(logger.last, step=i + 1), n_logs)
    ev = T.make_eval_step(cfg, mesh)
    loaders = {n: T.build_loader(d) for n, d in cfg.eval_data}
    threads = T.cpu_threads(cfg, mesh) if hasattr(T, "cpu_threads") else 1  # as the run's (before #22's: one)
    evaluator = T.Evaluator(cfg, loaders, lambda p, b: ev(p, b, None), run, *([threads] if threads > 1 else []))
    t = time.perf_counter()
    evaluator(0, state.params)
    eval_compile = time.perf_counter() - t - timed(lambda i: evaluator(0, state.params))
    n_evals = (steps - 1) // cfg.eval_every + 1 if cfg.eval_every else 1
    evaluation = timed(lambda i: evaluator(i, state.params), n_evals)
    ckpt = T.CheckpointManager(os.path.join(out, "ckpt"), cfg.checkpoint)
    saver = T.Checkpointer(cfg, ckpt, history, None)
    n_saves = (steps - 1) // cfg.checkpoint.every + 1 if cfg.checkpoint.every else 1
    checkpointing = timed(lambda i: saver.save(i + 1, state), n_saves) + timed(lambda i: ckpt.wait())
    run.finish()
    disabled.finish()
    bar.close()
    history.close()
    return dict(
        data=data,
        logging=logging,
        tracking=tracking,
        evaluation=evaluation,
        eval_compile=eval_compile,
        checkpointing=checkpointing,
        n_evals=n_evals,
        n_saves=n_saves,
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--eval-batches", type=int, default=100)
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--ckpt-every", type=int, default=500)
    ap.add_argument("--marin-from", default="")
    ap.add_argument("--label", default="")
    ap.add_argument(
        "--matmul-dtype", default="", help="float32 | bfloat16 (LlamaConfig.matmul_dtype); default: the preset's"
    )
    a = ap.parse_args()
    cfg = config(a.steps, a.eval_batches, a.eval_every, a.ckpt_every, a.matmul_dtype)
    print(
        f"marin from {os.path.dirname(marin.__file__)}; {cfg.model.summary()}; {a.steps} steps; load {os.getloadavg()}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        half = max(a.steps // 2, 1)
        bare = bare_step(cfg, half, fetch=False)  # half before the run, half after: load drift cancels
        t, c = time.perf_counter(), cpu_s()
        summary = T.train(cfg, os.path.join(tmp, "run"))
        outer, train_cpu = time.perf_counter() - t, cpu_s() - c
        run_hash = T.final_params_hash(os.path.join(tmp, "run"))
        bare, bare_cpu = (x + y for x, y in zip(bare, bare_step(cfg, a.steps - half, fetch=False)))
        synced = bare_step(cfg, a.steps, fetch=True)[0]
        parts = host_parts(cfg, a.steps, os.path.join(tmp, "parts"))
    wall, compile_s = summary["throughput/wall_s"], summary.get("throughput/compile_s", 0.0)
    steady = wall - compile_s - parts["eval_compile"] - parts["evaluation"]
    rows = {
        "compile (train step + eval step)": compile_s + parts["eval_compile"],
        "bare compiled step": bare,
        "data loading": parts["data"],
        "metric transfer (per-step sync)": max(synced - bare, 0.0),
        "logging (history, divergence, bar, records)": parts["logging"],
        "tracking (wandb offline)": parts["tracking"],
        f"evaluation ({parts['n_evals']} x {a.eval_batches} batches)": parts["evaluation"],
        f"checkpointing ({parts['n_saves']} saves + wait)": parts["checkpointing"],
    }
    accounted = sum(v for k, v in rows.items() if not k.startswith(("compile", "evaluation")))
    rows["Python between steps (rest)"] = steady - accounted
    print(f"\n{a.label or 'run'}: trainer wall {wall:.2f} s ({outer:.2f} s around train), final state hash {run_hash}")
    print("| part | s | ms/step | share of wall |\n|---|---:|---:|---:|")
    for k, v in rows.items():
        print(f"| {k} | {v:.2f} | {1e3 * v / a.steps:.2f} | {v / wall:.0%} |")
    print(f"| **trainer wall** | {wall:.2f} | {1e3 * wall / a.steps:.2f} | 100% |")
    print(
        f"\nwall per step without compile and evaluation: {1e3 * steady / a.steps:.2f} ms; bare step "
        f"{1e3 * bare / a.steps:.2f} ms; ratio {steady / bare:.2f} (issue bound 1.15); load {os.getloadavg()}"
    )
    print(
        f"process CPU s per step: trainer (whole train call) {1e3 * train_cpu / a.steps:.2f} ms, bare step "
        f"{1e3 * bare_cpu / a.steps:.2f} ms"
    )


if __name__ == "__main__":
    main()
