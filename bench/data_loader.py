"""Mixture loader throughput: random-access batches (any step, in random order) vs sequential, one core.

Run: MARIN_PREFIX=/tmp/marin_bench .venv/bin/python bench/data_loader.py
Builds (or reuses, cached) the local three-source recipe (web/code/math), then times `MixtureLoader.batch(step)`
for 200 batches of 16 x 2048 tokens. As a reference point it also times a plain in-memory copy of the same number of
tokens out of one token set's memory-mapped array (the floor any loader pays)."""

import os, time

os.environ.setdefault("OMP_NUM_THREADS", "1")
import numpy as np
from marin.core.executor import Executor
from marin.data.recipe import local_recipe
from marin.data.mixture import MixtureLoader

rec = local_recipe(seq_len=2048, batch_size=16)
st = rec.steps()
ex = Executor(verbose=False)
ex.run(list(st["tokens"].values()))
cfg = st["mixture_config"]
cfg = cfg.replace(components=tuple(c.replace(tokens=ex.output_path(c.tokens)) for c in cfg.components))
ld = MixtureLoader(cfg)
B, S, N = ld.batch_size, ld.seq_len, 200
ld.batch(0)
rows = []
rng = np.random.default_rng(0)
for name, steps in [
    ("sequential steps 0..199", range(N)),
    ("random steps in [0, 10^6)", rng.integers(0, 10**6, N)),
    ("resume: fresh loader at step 123456, 200 steps", range(123456, 123456 + N)),
]:
    if name.startswith("resume"):
        ld = MixtureLoader(cfg, verify=False)
    t = time.perf_counter()
    for s in steps:
        ld.batch(int(s))
    dt = time.perf_counter() - t
    rows.append((name, dt, N * B * S / dt))
vals, _ = ld.sets["code"].shard(0)
t = time.perf_counter()
for i in range(N * B):
    np.array(vals[(i * S) % (len(vals) - S) :][:S])
dt = time.perf_counter() - t
rows.append(("reference: bare memmap slice copies", dt, N * B * S / dt))
print(f"{N} batches of {B} x {S} tokens, 3 components, one process (OMP_NUM_THREADS=1)\n")
print("| access pattern | seconds | tokens/s |")
print("|---|---|---|")
for n, dt, tps in rows:
    print(f"| {n} | {dt:.2f} | {tps:,.0f} |")
