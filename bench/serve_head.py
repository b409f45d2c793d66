"""The vocabulary projection at several rows: a quantized head by column chunks against XLA's whole-matrix convert +
dot and against float32, alone and inside the engine's decode step, in one process (#20).

Run: .venv/bin/python bench/serve_head.py [--blocks 5]

Shape: `bench/serve_real.py`'s SmolLM-135M (the tied head is 576 x 49,152; random weights). Part 1 times the
product alone at 1, 2, 4 and 8 rows: float32, and int8 / int4 (group 96) both whole (`_xla_matmul`, the path before
the chunks), by chunks of `CHUNK_COLUMNS` (`by_column_chunks`, what `qmatmul` runs above `KERNEL_MAX_ROWS` rows)
and through `qmatmul` itself (at these row counts the CPU kernels of `marin.kernels.cpu_rowvec`, where they run). Part 2 times 20 decode steps of an int8-block engine at 1 and 8 rows
with `head="none"` and `head="int8"`. Blocks alternate between the variants; printed: best / median per variant,
the ratios of medians, and the load average."""

import argparse, os, statistics, time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax, numpy as np

from marin.models.transformer import LlamaConfig, init, vocab_projection
from marin.serve import engine as E
from marin.serve.quantize import _xla_matmul, by_column_chunks, qmatmul, quantize_int4, quantize_int8, quantize_model

ap = argparse.ArgumentParser()
ap.add_argument("--blocks", type=int, default=5)
args = ap.parse_args()
CFG = LlamaConfig(
    vocab_size=49152, seq_len=2048, d_model=576, n_layers=30, n_heads=9, n_kv_heads=3, d_ff=1536, tie_embeddings=True
)
model = init(CFG, key=jax.random.PRNGKey(0))
print(f"load average before: {os.getloadavg()}; {CFG.summary()}")
med = statistics.median


def timed(f, *a, n=10):
    "Seconds per call of `f(*a)`, over `n` calls."
    jax.block_until_ready(f(*a))
    t = time.perf_counter()
    for _ in range(n):
        y = f(*a)
    jax.block_until_ready(y)
    return (time.perf_counter() - t) / n


def table(rows: dict, base: str):
    "Best / median ms of each variant per row key, and each one's speedup over `base` (ratio of medians)."
    for key, res in rows.items():
        cells = " ".join(
            f"| {v}: {min(t) * 1e3:.2f} / {med(t) * 1e3:.2f} ms ({med(res[base]) / med(t):.2f}x)"
            for v, t in res.items()
        )
        print(f"| {key} {cells} |", flush=True)


w = vocab_projection(model)  # [576, 49152]
heads = {"float32": w, "int8": quantize_int8(w), "int4": quantize_int4(w, 96)}
part1 = {}
for rows in (1, 2, 4, 8):
    x = jax.random.normal(jax.random.PRNGKey(rows), (rows, CFG.d_model))
    fns = {"float32": (jax.jit(_xla_matmul), heads["float32"])}
    for mode in ("int8", "int4"):
        fns[f"{mode} whole"] = (jax.jit(_xla_matmul), heads[mode])
        fns[f"{mode} chunks"] = (jax.jit(by_column_chunks), heads[mode])
        fns[f"{mode} qmatmul"] = (jax.jit(qmatmul), heads[mode])
    ref = fns["int8 whole"][0](x, heads["int8"])
    np.testing.assert_allclose(fns["int8 chunks"][0](x, heads["int8"]), ref, rtol=1e-4, atol=1e-3)
    part1[f"{rows} row{'s' if rows > 1 else ''}"] = res = {v: [] for v in fns}
    for _ in range(args.blocks):
        for v, (f, hw) in fns.items():
            res[v].append(timed(f, x, hw))
print("\n## The projection alone (576 x 49,152), ms per product\n")
table(part1, "float32")


def decode_steps(m):
    "The engine's batch-1 and 8-row decode steps on `m`, each on its own cache."
    eng, steps = E.Engine(m, max_batch=8, max_seq_len=512), {}
    for b in (1, 8):
        feed = np.stack(
            [np.zeros(b, np.int32), np.full(b, 64, np.int32), np.arange(b, dtype=np.int32), np.zeros(b, np.int32)]
        )

        def step(feed=feed, eng=eng):
            out, eng.cache_k, eng.cache_v = eng._decode_sample(
                eng.model, feed, eng.cache_k, eng.cache_v, eng._table, attn_len=128
            )
            return out

        steps[b] = step
    return eng, steps


engines = {f"head {h}": decode_steps(quantize_model(model, "int8", head=h)) for h in ("none", "int8")}
part2 = {f"{b} row{'s' if b > 1 else ''}": {v: [] for v in engines} for b in (1, 8)}
for _ in range(args.blocks):
    for v, (_, steps) in engines.items():
        for b, step in steps.items():
            part2[f"{b} row{'s' if b > 1 else ''}"][v].append(timed(step, n=20))
print("\n## int8 blocks: the decode step with a float32 or an int8 head, ms per step\n")
table(part2, "head none")
for eng, _ in engines.values():
    eng.close()
print(f"\nload average after: {os.getloadavg()}")
