"""The `nano` preset's train step at several `grad_accum` values, interleaved in one process (issue #22).

Each setting compiles its own step over the same 12 x 64 batches; then blocks of --steps steps run in turn, setting
after setting, --blocks times, so load drift hits them alike; the median ms per step of each is printed with every
block's time, and the median process CPU ms per step (less moved by time the hypervisor steals than wall time).
The step is the trainer's own (`setup_training(cfg).step`), on batches already placed (`_nano_steps`).

    .venv/bin/python bench/train_accum.py 1 2 4 [--blocks 8] [--steps 50]"""

import argparse, os

from _nano_steps import interleave, report, warmed

ap = argparse.ArgumentParser()
ap.add_argument("accum", type=int, nargs="+")
ap.add_argument("--blocks", type=int, default=8)
ap.add_argument("--steps", type=int, default=50)
a = ap.parse_args()
print(f"grad_accum {a.accum}; load {os.getloadavg()}", flush=True)
runs = {f"grad_accum {n}": warmed(grad_accum=n) for n in a.accum}
interleave(runs, a.blocks, a.steps)
report(runs)
print(f"load {os.getloadavg()}")
