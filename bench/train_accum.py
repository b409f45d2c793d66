"""The `nano` preset's train step at several `grad_accum` values, interleaved in one process (issue #22).

Each setting compiles its own step over the same 12 x 64 batches; then blocks of --steps steps run in turn, setting
after setting, --blocks times, so load drift hits them alike; the median ms per step of each is printed with every
block's time, and the median process CPU ms per step (less moved by time the hypervisor steals than wall time). The step is the trainer's own (`setup_training(cfg).step`), on batches already placed.

    .venv/bin/python bench/train_accum.py 1 2 4 [--blocks 8] [--steps 50]"""

import argparse, os, resource, statistics, time

import jax

from marin.train import trainer as T
from marin.train.cli import PRESETS

ap = argparse.ArgumentParser()
ap.add_argument("accum", type=int, nargs="+")
ap.add_argument("--blocks", type=int, default=8)
ap.add_argument("--steps", type=int, default=50)
a = ap.parse_args()
print(f"grad_accum {a.accum}; load {os.getloadavg()}", flush=True)
runs = {}


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


for n in a.accum:
    cfg = PRESETS["nano"]().replace(grad_accum=n, progress=False, tracker="disabled")
    s = T.setup_training(cfg)
    state, batches = s.init_state(), [s.batch(i) for i in range(32)]
    for i in range(30):  # compile, then past the slow first steps of a process
        state, _ = s.step(state, batches[i % 32], s.frozen)
    jax.block_until_ready(state)
    runs[n] = [s, state, batches, [], []]
for _ in range(a.blocks):
    for n, r in runs.items():
        s, state, batches, times, cpu = r
        t, c = time.perf_counter(), cpu_s()
        for i in range(a.steps):
            state, _ = s.step(state, batches[i % 32], s.frozen)
        jax.block_until_ready(state)
        r[1] = state
        times.append((time.perf_counter() - t) / a.steps * 1e3)
        cpu.append((cpu_s() - c) / a.steps * 1e3)
base = statistics.median(runs[a.accum[0]][3])
for n, r in runs.items():
    med, cpu, cpu0 = statistics.median(r[3]), statistics.median(r[4]), statistics.median(runs[a.accum[0]][4])
    print(
        f"grad_accum {n}: median {med:.1f} ms/step ({base / med:.2f}x of grad_accum {a.accum[0]}), "
        f"CPU {cpu:.1f} ms/step ({cpu0 / cpu:.2f}x); blocks",
        " ".join(f"{t:.0f}" for t in r[3]),
    )
print(f"load {os.getloadavg()}")
