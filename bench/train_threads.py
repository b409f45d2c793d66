"""The `nano` preset's step (the shakespeare_char shape) as one jitted program against the trainer's
`HostThreadedStep` (its microbatches' gradients on host threads at once), in one process (issue #22).

Two measurements, each alternating the two so that load drift hits them alike:

- the bare step: both compile over the same 12 x 64 batches already placed; blocks of --steps steps run in turn,
  --blocks times (median wall and process CPU ms per step, the loss after 30 steps, every block's time); with
  --accum 4 also grad_accum 4 (two microbatches per thread on two cores);
- the trainer: --runs whole `train` calls of --run-steps steps each way (evaluation and checkpoints off, tracker
  disabled), the one-program runs with `host_threads=1` (the trainer as before the change): each run's wall past
  its first step (`throughput/wall_s` less `compile_s`) and its final state hash (a rerun must repeat it).

    .venv/bin/python bench/train_threads.py [--blocks 8] [--steps 40] [--accum 4] [--runs 3] [--run-steps 300]"""

import argparse, os, statistics, tempfile

from marin.train import trainer as T
from marin.train.cli import PRESETS
from _nano_steps import interleave, report, warmed


def trainer_run(steps: int, threads: bool, tmp: str) -> dict:
    "One `train` call of the nano preset; `threads=False`: `host_threads=1`, one program."
    cfg = PRESETS["nano"]().replace(
        num_train_steps=steps,
        eval_every=0,
        progress=False,
        tracker="disabled",
        checkpoint=T.CheckpointConfig(every=0),
        host_threads=0 if threads else 1,
    )
    out = tempfile.mkdtemp(dir=tmp)
    s = T.train(cfg, out)
    return {"wall_s": s["throughput/wall_s"], "compile_s": s["throughput/compile_s"], "hash": T.final_params_hash(out)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", type=int, default=8)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--accum", type=int, nargs="*", default=[])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--run-steps", type=int, default=300)
    a = ap.parse_args()
    print(f"cores {len(os.sched_getaffinity(0))}; load {os.getloadavg()}", flush=True)
    runs = {"one program": warmed(one_program=True), "host threads": warmed()}
    for n in a.accum:
        runs[f"grad_accum {n}, one program"] = warmed(one_program=True, grad_accum=n)
        runs[f"grad_accum {n}, host threads"] = warmed(grad_accum=n)
    for name, r in runs.items():
        s = r["setup"].step
        print(f"{name}: {type(s).__name__}" + (f", {s.threads} threads" if isinstance(s, T.HostThreadedStep) else ""))
    interleave(runs, a.blocks, a.steps)
    report(runs)
    res = {"one program": [], "host threads": []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(a.runs):
            for name, rs in res.items():
                rs.append(r := trainer_run(a.run_steps, name == "host threads", tmp))
                print(f"train, {name}: wall {r['wall_s']:.2f} s (compile {r['compile_s']:.2f} s), hash {r['hash']}")
    base = statistics.median(r["wall_s"] - r["compile_s"] for r in res["one program"])
    for name, rs in res.items():
        med = statistics.median(r["wall_s"] - r["compile_s"] for r in rs)
        print(
            f"train, {name}: median {1e3 * med / a.run_steps:.1f} ms/step past the first step ({base / med:.2f}x); "
            f"{len({r['hash'] for r in rs})} distinct final hash(es) over {len(rs)} runs"
        )
    print(f"load {os.getloadavg()}")


if __name__ == "__main__":
    main()
