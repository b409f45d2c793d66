"""Where the `nano` train step's time goes inside XLA:CPU (issue #22): a `jax.profiler` trace of --steps steps.

XLA:CPU may split one op over its intra-op threads, and the trace records one event per thread: an op on both
cores shows as two overlapping events. So each kind of op (matrix products: YNNPACK fusions `ynn_fusion`, XLA's own
`dot` / `dot_general`, FFI calls; then the elementwise fusions and copies by name, numbers stripped) gets two
numbers: its wall (the union of its events' spans: the step's time while such an op runs) and its thread time (the
sum over threads). Then the ops that are not products by source (the JAX operation in the op's HLO metadata), and
how many distinct ops ran at once (0, 1, 2, ...; an op's per-thread events merged into one span) over the trace.
Only events named after an instruction of the compiled step's HLO count as ops. The step profiled is
`make_train_step`'s one jitted program (the trainer's `HostThreadedStep` runs the same ops as two executions at once,
whose same-named ops this trace could not tell apart; `bench/train_threads.py` compares the two).

    .venv/bin/python bench/train_profile.py [--steps 20] [--top 20] [--matmul-dtype bfloat16]"""

import argparse, collections, glob, gzip, json, os, re, tempfile, time

import jax

from marin.train import trainer as T
from marin.train.cli import PRESETS


PRODUCTS = ("ynn_fusion", "dot", "ffi_call")  # op kinds that are matrix products


def merged(spans: list[tuple[float, float, int]]) -> list[tuple[float, float, set[int]]]:
    """Overlapping `(start, end, thread)` spans joined: one op's events on several threads become one
    `(start, end, threads)` span."""
    out = []
    for a, b, t in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b), out[-1][2] | {t})
        else:
            out.append((a, b, {t}))
    return out


def covered(spans: list[tuple]) -> float:
    "Total length the `(start, end, ...)` spans cover, overlaps counted once."
    return sum(b - a for a, b, _ in merged([(s[0], s[1], 0) for s in spans]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--matmul-dtype", default="float32", help="LlamaConfig.matmul_dtype: float32 | bfloat16")
    a = ap.parse_args()
    nano = PRESETS["nano"]()
    nano = nano.replace(model=nano.model.replace(matmul_dtype=a.matmul_dtype), progress=False, tracker="disabled")
    s = T.setup_training(nano)
    s.step = T.make_train_step(s.cfg, s.mesh, s.opt, s.schedule, s.shardings)
    state, batches = s.init_state(), [s.batch(i) for i in range(32)]
    for i in range(40):  # compile, then past a process's slow first steps
        state, _ = s.step(state, batches[i % 32], s.frozen)
    jax.block_until_ready(state)
    t = time.perf_counter()
    for i in range(100):
        state, _ = s.step(state, batches[i % 32], s.frozen)
    jax.block_until_ready(state)
    print(f"untraced: {(time.perf_counter() - t) * 10:.1f} ms/step; load {os.getloadavg()}")
    hlo = s.step.lower(state, batches[0], s.frozen).compile().as_text()
    source = dict(re.findall(r"%?([\w.\-]+) = [^\n]*?metadata=\{op_name=\"([^\"]*)\"", hlo))
    with tempfile.TemporaryDirectory() as d:
        with jax.profiler.trace(d):
            for i in range(a.steps):
                state, _ = s.step(state, batches[i % 32], s.frozen)
            jax.block_until_ready(state)
        with gzip.open(glob.glob(f"{d}/**/*.trace.json.gz", recursive=True)[0]) as f:
            events = json.load(f)["traceEvents"]
    names = set(re.findall(r"\n\s*(?:ROOT )?%?([\w.\-]+) = ", hlo))
    ops = [e for e in events if e.get("ph") == "X" and "dur" in e and e["name"] in names]
    per = lambda us: us / a.steps / 1e3  # ms per step
    spans, by_name, by_source = collections.defaultdict(list), collections.defaultdict(list), collections.Counter()
    for e in ops:
        k, span = re.sub(r"\.\d+$", "", e["name"]), (e["ts"], e["ts"] + e["dur"], e["tid"])
        spans[k].append(span)
        by_name[e["name"]].append(span)
        if not k.startswith(PRODUCTS):
            by_source[re.sub(r"jit\(step\)/(while/body/)?(closed_call/)?", "", source.get(e["name"], "?"))] += e["dur"]
    instances, threads = [], collections.defaultdict(collections.Counter)  # kind -> {threads per call: calls}
    for name, v in by_name.items():
        for call in merged(v):
            instances.append(call)
            threads[re.sub(r"\.\d+$", "", name)][len(call[2])] += 1
    span = max(b for _, b, _ in instances) - min(a for a, _, _ in instances)
    wall = {k: covered(v) for k, v in spans.items()}
    thread = {k: sum(b - a for a, b, _ in v) for k, v in spans.items()}
    products = covered([s for k, v in spans.items() if k.startswith(PRODUCTS) for s in v])
    print(
        f"traced: {per(span):.1f} ms/step of wall; ops run {per(covered(instances)):.1f} of "
        f"it (products {per(products):.1f}), {per(sum(thread.values())):.1f} ms/step of thread time\n"
    )
    print(
        "| op kind | wall ms/step | thread ms/step | calls/step | calls on 1 / 2+ threads |\n|---|---:|---:|---:|---:|"
    )
    for k in sorted(wall, key=wall.get, reverse=True)[: a.top]:
        calls = sum(threads[k].values())
        split = f"{threads[k][1]} / {calls - threads[k][1]}"
        print(f"| {k} | {per(wall[k]):.2f} | {per(thread[k]):.2f} | {calls / a.steps:.0f} | {split} |")
    print("\n| not a product: source | thread ms/step |\n|---|---:|")
    for k, v in by_source.most_common(a.top):
        print(f"| {k[:90]} | {per(v):.2f} |")
    edges = sorted([(a_, 1) for a_, _, _ in instances] + [(b, -1) for _, b, _ in instances])
    running, last, at_once = 0, edges[0][0], collections.Counter()
    for ts, d in edges:
        at_once[running] += ts - last
        running, last = running + d, ts
    print(
        "\ndistinct ops running at once: " + ", ".join(f"{k}: {per(v):.1f} ms/step" for k, v in sorted(at_once.items()))
    )


if __name__ == "__main__":
    main()
