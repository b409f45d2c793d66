"""The `nano` preset's train step (the `shakespeare_char` shape), warmed and timed in interleaved blocks: the A/B
loop of the benches that compare variants of the step in one process (`train_accum`, `train_gemm`), so that load
drift and the hypervisor's slow spells hit every variant alike."""

import statistics, time

import jax

from marin.train import trainer as T
from marin.train.cli import PRESETS

from _steal import cpu_s


def warmed(one_program: bool = False, **fields) -> dict:
    """The trainer's own step (`setup_training(cfg).step`) for the nano preset with `fields` replaced, traced and
    compiled now, run 30 steps past a process's slow first steps over 32 batches already placed. `one_program`:
    `make_train_step`'s single jitted program even where the trainer would run the microbatches on host threads."""
    s = T.setup_training(PRESETS["nano"]().replace(progress=False, tracker="disabled", **fields))
    if one_program:
        s.step = T.make_train_step(s.cfg, s.mesh, s.opt, s.schedule, s.shardings)
    state, batches = s.init_state(), [s.batch(i) for i in range(32)]
    for i in range(30):
        state, m = s.step(state, batches[i % 32], s.frozen)
    return {"setup": s, "state": jax.block_until_ready(state), "batches": batches, "loss30": float(m["loss"])}


def interleave(runs: dict[str, dict], blocks: int, steps: int) -> None:
    "`blocks` rounds of `steps` steps of every run in turn; each run's `ms` and `cpu_ms` get one entry per block."
    for _ in range(blocks):
        for r in runs.values():
            s, state, batches = r["setup"], r["state"], r["batches"]
            t, c = time.perf_counter(), cpu_s()
            for i in range(steps):
                state, _ = s.step(state, batches[i % 32], s.frozen)
            r["state"] = jax.block_until_ready(state)
            r.setdefault("ms", []).append((time.perf_counter() - t) / steps * 1e3)
            r.setdefault("cpu_ms", []).append((cpu_s() - c) / steps * 1e3)


def report(runs: dict[str, dict]) -> None:
    """Per run: median wall and CPU ms per step, each as a speed-up over the first run's, the loss after 30 steps,
    and every block's time."""
    first = next(iter(runs.values()))
    base, base_cpu = statistics.median(first["ms"]), statistics.median(first["cpu_ms"])
    for name, r in runs.items():
        med, cpu = statistics.median(r["ms"]), statistics.median(r["cpu_ms"])
        print(
            f"{name}: median {med:.1f} ms/step ({base / med:.2f}x), CPU {cpu:.1f} ms/step ({base_cpu / cpu:.2f}x), "
            f"loss after 30 steps {r['loss30']:.6f}; blocks " + " ".join(f"{t:.0f}" for t in r["ms"])
        )


def best_ms(f, args, reps):
    "The best of 5 runs of `reps // 5` calls (at least one), in ms per call."
    f(*args).block_until_ready()
    calls, runs = max(1, reps // 5), []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(calls):
            r = f(*args)
        r.block_until_ready()
        runs.append((time.perf_counter() - t) / calls * 1e3)
    return min(runs)
