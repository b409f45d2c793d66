"""Where one decode step's time goes at the 135M shape, by XLA operation (issue #20, item 1).

Run: .venv/bin/python bench/serve_profile.py [--modes none,int8,int4,int4-min] [--batch 1,8] [--steps 10] [--top 8]

The model is `bench/serve_real.py`'s (SmolLM-135M's shape, random weights, tied embeddings). For each weight mode
and batch, the engine's jitted `decode` (attention over 128 cached positions, the cache donated as the engine does)
runs --steps times under `jax.profiler.trace`; the trace's XLA:CPU operation events are summed per step and
grouped: `convert` fusions (a quantized weight turned into float32 in a pass of its own before its dot), dots,
copies, and the rest; then the --top single operations. The step's wall time (timed without the profiler) is
printed beside them: operations on the two cores overlap, so their sum can exceed it."""

import argparse, collections, functools, glob, gzip, json, os, tempfile, time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax, jax.numpy as jnp

from marin.models.transformer import LlamaConfig, init
from marin.serve import engine as E
from marin.serve.quantize import quantize_model

ap = argparse.ArgumentParser()
ap.add_argument("--modes", default="none,int8,int4,int4-min")
ap.add_argument("--batch", default="1,8")
ap.add_argument("--steps", type=int, default=10)
ap.add_argument("--top", type=int, default=8)
args = ap.parse_args()
CFG = LlamaConfig(
    vocab_size=49152, seq_len=2048, d_model=576, n_layers=30, n_heads=9, n_kv_heads=3, d_ff=1536, tie_embeddings=True
)
WRAPPERS = ("ThunkExecutor", "$", "PjitFunction", "while", "Thunk", "TfrtCpu", "PjRt")


def group(name: str) -> str:
    return next((g for g in ("convert", "dot", "copy") if g in name), "other")


def profile(model, b: int) -> tuple[float, collections.Counter, collections.Counter]:
    eng = E.Engine(model, max_batch=8, max_seq_len=512)
    decode = jax.jit(functools.partial(E.decode, dtype=eng.dtype), static_argnames=("attn_len",), donate_argnums=(4, 5))
    a = [jnp.zeros(b, jnp.int32), jnp.full(b, 64, jnp.int32), jnp.arange(b, dtype=jnp.int32)]

    def step():
        lg, eng.cache_k, eng.cache_v = decode(eng.model, *a, eng.cache_k, eng.cache_v, attn_len=128)
        return lg

    for _ in range(3):
        step().block_until_ready()
    t = time.perf_counter()
    for _ in range(args.steps):
        lg = step()
    lg.block_until_ready()
    wall = (time.perf_counter() - t) / args.steps
    with tempfile.TemporaryDirectory() as d:
        with jax.profiler.trace(d, create_perfetto_trace=True):
            for _ in range(args.steps):
                lg = step()
            lg.block_until_ready()
        with gzip.open(glob.glob(f"{d}/**/*.trace.json.gz", recursive=True)[0]) as f:
            events = json.load(f)
    events = events["traceEvents"] if isinstance(events, dict) else events
    ops, groups = collections.Counter(), collections.Counter()
    for e in events:
        if e.get("ph") == "X" and "dur" in e and not e["name"].startswith(WRAPPERS):
            ops[e["name"]] += e["dur"] / 1e3 / args.steps  # ms per step
            groups[group(e["name"])] += e["dur"] / 1e3 / args.steps
    eng.close()
    return wall * 1e3, groups, ops


model = init(CFG, key=jax.random.PRNGKey(0))
print(f"load average before: {os.getloadavg()}; {CFG.summary()}")
print("| weights | batch | step wall ms | convert ms | dot ms | copy ms | other ms | top operations (ms per step) |")
print("|---|---:|---:|---:|---:|---:|---:|---|")
for mode in args.modes.split(","):
    m = model if mode == "none" else quantize_model(model, mode)
    for b in map(int, args.batch.split(",")):
        wall, g, ops = profile(m, b)
        top = ", ".join(f"`{k}` {v:.1f}" for k, v in ops.most_common(args.top))
        print(
            f"| {mode} | {b} | {wall:.1f} | {g['convert']:.1f} | {g['dot']:.1f} | {g['copy']:.1f} | {g['other']:.1f} | {top} |",
            flush=True,
        )
print(f"load average after: {os.getloadavg()}")
