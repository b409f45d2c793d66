"""Where the `nano` train step's time goes inside XLA:CPU (issue #22): a `jax.profiler` trace of --steps steps.

Prints the step's wall in the trace, the op time by kind (matrix products: YNNPACK fusions `ynn_fusion`, XLA's own
`dot` / `dot_general`, FFI calls; then the elementwise fusions and copies by name, numbers stripped), by source
(the JAX operation in the op's HLO metadata) for the ops that are not products, and how many ops ran at once (0, 1,
2, ...) over the trace: on a 2-core machine the step is a chain of small ops, one at a time most of the wall.

    .venv/bin/python bench/train_profile.py [--steps 20] [--top 20]"""

import argparse, collections, glob, gzip, json, os, re, tempfile, time

import jax

from marin.train import trainer as T
from marin.train.cli import PRESETS

FRAMES = ("ThunkExecutor", "$", "PjitFunction", "SlinkyThreadPool", "while", "ParseArguments")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--top", type=int, default=20)
    a = ap.parse_args()
    s = T.setup_training(PRESETS["nano"]().replace(progress=False, tracker="disabled"))
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
    ops = [e for e in events if e.get("ph") == "X" and "dur" in e and not e["name"].startswith(FRAMES)]
    per = lambda us: us / a.steps / 1e3  # ms per step
    kinds, calls, by_source = collections.Counter(), collections.Counter(), collections.Counter()
    for e in ops:
        k = re.sub(r"\.\d+$", "", e["name"])
        kinds[k] += e["dur"]
        calls[k] += 1
        if not k.startswith(("ynn_fusion", "dot", "ffi_call")):
            by_source[re.sub(r"jit\(step\)/(while/body/)?(closed_call/)?", "", source.get(e["name"], "?"))] += e["dur"]
    span = max(e["ts"] + e["dur"] for e in ops) - min(e["ts"] for e in ops)
    print(f"traced: {per(span):.1f} ms/step of wall, {per(sum(kinds.values())):.1f} ms/step of op time\n")
    print("| op kind | ms/step | calls/step |\n|---|---:|---:|")
    for k, v in kinds.most_common(a.top):
        print(f"| {k} | {per(v):.2f} | {calls[k] / a.steps:.0f} |")
    print("\n| not a product: source | ms/step |\n|---|---:|")
    for k, v in by_source.most_common(a.top):
        print(f"| {k[:90]} | {per(v):.2f} |")
    edges = sorted([(e["ts"], 1) for e in ops] + [(e["ts"] + e["dur"], -1) for e in ops])
    running, last, at_once = 0, edges[0][0], collections.Counter()
    for ts, d in edges:
        at_once[running] += ts - last
        running, last = running + d, ts
    print("\nops running at once: " + ", ".join(f"{k}: {per(v):.1f} ms/step" for k, v in sorted(at_once.items())))


if __name__ == "__main__":
    main()
