"""The `nano` preset's step (the shakespeare_char shape) as one jitted program against the trainer's
`HostThreadedStep` (its microbatches' gradients on host threads at once), interleaved in one process (issue #22).

Both compile over the same 12 x 64 batches; blocks of --steps steps run in turn, --blocks times, so load drift hits
them alike. Printed per run: median wall and process CPU ms per step, the loss after 30 steps, every block's time;
with --accum 4 also grad_accum 4 (two microbatches per thread on two cores).

    .venv/bin/python bench/train_threads.py [--blocks 8] [--steps 40] [--accum 4]"""

import argparse, os

from marin.train import trainer as T
from _nano_steps import interleave, report, warmed

ap = argparse.ArgumentParser()
ap.add_argument("--blocks", type=int, default=8)
ap.add_argument("--steps", type=int, default=40)
ap.add_argument("--accum", type=int, nargs="*", default=[])
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
print(f"load {os.getloadavg()}")
