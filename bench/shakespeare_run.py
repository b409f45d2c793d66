"""The whole `shakespeare_char` training run, before and after, each in a fresh process (issue #22).

Each run is one `python` process that imports `marin`, builds the `nano` preset with the experiment's settings
(`experiments_nb/shakespeare_char.ipynb`: 100 validation batches per evaluation, evaluations every 500 steps and at
the end, checkpoints every 500), trains it into a fresh directory and prints the process's wall time (imports,
data, the state's init, compiles, steps, evaluations, checkpoints), the trainer's own wall, the final state hash
and the last validation loss. The runs go one after another in this order: before (`--marin-from DIR`, cold), after
with an empty compilation cache (cold: what a first run costs), after again with the cache the cold run filled
(warm: a rerun of the shape).

    .venv/bin/python bench/shakespeare_run.py --steps 2000 --marin-from DIR   # DIR: git archive REV marin | tar -x -C DIR
"""

import argparse, json, os, subprocess, sys, tempfile, time

CHILD = r"""
import os, sys, time, json
t0 = time.perf_counter()
if os.environ.get("MARIN_FROM"):
    sys.meta_path = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
    sys.path.insert(0, os.environ["MARIN_FROM"])
import marin
from marin.train.cli import PRESETS
from marin.train.trainer import train, final_params_hash
base = PRESETS["nano"]()
cfg = base.replace(num_train_steps=int(os.environ["STEPS"]), eval_batches=100, progress=False, tracker="disabled",
                   eval_every=int(os.environ["EVAL_EVERY"]), checkpoint=base.checkpoint.replace(every=int(os.environ["EVAL_EVERY"])))
out = os.environ["OUT"]
s = train(cfg, out)
print("RESULT " + json.dumps({"process_s": time.perf_counter() - t0, "trainer_s": s["throughput/wall_s"],
    "compile_s": s.get("throughput/compile_s"), "val_loss": s["eval/val/loss"], "hash": final_params_hash(out),
    "marin": os.path.dirname(marin.__file__)}))
"""


def run(label: str, steps: int, marin_from: str, cache: str, tmp: str) -> dict:
    env = dict(os.environ, STEPS=str(steps), EVAL_EVERY=str(max(steps // 4, 1)), OUT=os.path.join(tmp, label))
    env.update(MARIN_FROM=marin_from, MARIN_COMPILATION_CACHE=cache, WANDB_MODE="disabled")
    t, load = time.perf_counter(), os.getloadavg()
    p = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"{label} failed:\n{p.stderr[-3000:]}")
    r = json.loads(next(l for l in p.stdout.splitlines() if l.startswith("RESULT "))[7:])
    r.update(label=label, load_start=load[0], load_end=os.getloadavg()[0], outer_s=time.perf_counter() - t)
    print(json.dumps(r), flush=True)
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--marin-from", required=True)
    a = ap.parse_args()
    print(f"{a.steps} steps; load {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as tmp:
        cache = os.path.join(tmp, "jax-cache")
        rows = [
            run("before (035fdad)", a.steps, a.marin_from, "off", tmp),
            run("after, cold cache", a.steps, "", cache, tmp),
            run("after, warm cache", a.steps, "", cache, tmp),
        ]
    b = rows[0]
    print("\n| run | process s | trainer s | compile s | val loss | final state hash | vs before (process) | load |")
    print("|---|---:|---:|---:|---:|---|---:|---|")
    for r in rows:
        print(
            f"| {r['label']} | {r['process_s']:.1f} | {r['trainer_s']:.1f} | {r['compile_s']:.1f} | {r['val_loss']:.6f} "
            f"| `{r['hash']}` | {b['process_s'] / r['process_s']:.2f}x | {r['load_start']:.1f}-{r['load_end']:.1f} |"
        )
    print(f"load at the end {os.getloadavg()}")


if __name__ == "__main__":
    main()
