"""The CPU kernels (`marin.kernels.cpu_rowvec`) against XLA's convert + dot, in one process (#20).

Run: .venv/bin/python bench/serve_rowvec.py [--blocks 6] [--tokens 33]

The model is `bench/serve_real.py`'s 135M-parameter shape (SmolLM-135M: 30 layers, d_model 576, 9 / 3 heads, d_ff
1536, vocabulary 49,152, tied embeddings; random weights) in float32, int8, int4 and int4-min (group 128, which becomes 96 at
width 576), with its vocabulary projection in float32 or quantized (`head=`; `marin serve --quantize` quantizes it to
int8 by default). For each, engines are built: one traced with the kernels, one with `MARIN_CPU_KERNELS=off` (XLA's
convert + dot). Then blocks alternate between them: one request decoding --tokens greedy tokens (batch 1), and 20
bare decode steps at 1, 2 and 8 rows (8 sequences decoding at once; the kernels take up to `KERNEL_MAX_ROWS`). A
third engine runs the kernels on one thread (`MARIN_CPU_KERNEL_THREADS=1`) against their default, all of XLA's
intra-op threads. Printed: the best and the median block of each, the ratios, the load average, and the share of
the machine's CPU time the hypervisor took ("steal", /proc/stat) while each weight mode was measured."""

import argparse, os, statistics, time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax, numpy as np

from _steal import measured
from marin.kernels.cpu_rowvec import rowvec_available
from marin.models.transformer import LlamaConfig, init
from marin.serve import engine as E
from marin.serve.quantize import quantize_model

ap = argparse.ArgumentParser()
ap.add_argument("--blocks", type=int, default=6)
ap.add_argument("--tokens", type=int, default=33)
args = ap.parse_args()
CFG = LlamaConfig(
    vocab_size=49152, seq_len=2048, d_model=576, n_layers=30, n_heads=9, n_kv_heads=3, d_ff=1536, tie_embeddings=True
)
assert rowvec_available(), "the kernel does not run here: no C++ compiler, or not the CPU backend"
model = init(CFG, key=jax.random.PRNGKey(0))
prompt = np.random.default_rng(0).integers(1, CFG.vocab_size, 64).tolist()
params = E.SamplingParams(max_tokens=args.tokens, temperature=0.0, ignore_eos=True)
print(f"load average before: {os.getloadavg()}; {CFG.summary()}")


VARIANTS = {"kernel": ("on", "0"), "kernel, 1 thread": ("on", "1"), "xla": ("off", "0")}


def engine(m, variant: str):
    "An engine whose programs are traced (and so compiled) with the kernel on or off, on all threads or one."
    os.environ["MARIN_CPU_KERNELS"], os.environ["MARIN_CPU_KERNEL_THREADS"] = VARIANTS[variant]
    eng = E.Engine(m, max_batch=8, max_seq_len=512)
    steps = {}
    for b in (1, 2, 8):  # the engine's decode_sample at b rows, on its own cache
        feed = np.stack(
            [np.zeros(b, np.int32), np.full(b, 64, np.int32), np.arange(b, dtype=np.int32), np.zeros(b, np.int32)]
        )

        def step(feed=feed):
            out, eng.cache_k, eng.cache_v = eng._decode_sample(
                eng.model, feed, eng.cache_k, eng.cache_v, eng._table, attn_len=128
            )
            return out

        jax.block_until_ready(step())
        steps[b] = step
    eng.generate([prompt], params)  # traced and compiled now, under this setting
    os.environ.pop("MARIN_CPU_KERNELS"), os.environ.pop("MARIN_CPU_KERNEL_THREADS")
    return eng, steps


def timed_generate(eng):
    t = time.perf_counter()
    c = eng.generate([prompt], params)[0]
    return (args.tokens - 1) / (time.perf_counter() - t - c.ttft_s)


print(
    "| weights | measure | kernel (best / median) | kernel, 1 thread (best / median) | XLA (best / median) |"
    " kernel vs 1 thread (median) | kernel vs XLA (median) |"
)
print("|---|---|---:|---:|---:|---:|---:|")
MODES = (
    ("float32", "none"),
    ("int8", "none"),
    ("int8", "int8"),
    ("int4", "int8"),
    ("int4", "int4"),
    ("int4-min", "int8"),
)
for mode, head in MODES:
    m = model if mode == "float32" else quantize_model(model, mode, head=head)
    engines = {v: engine(m, v) for v in VARIANTS}

    def block(engines=engines):
        "One measurement of every variant, in turn."
        out = {}
        for name, (eng, steps) in engines.items():
            r = {"decode tok/s, batch 1": timed_generate(eng)}
            for b, step in steps.items():
                t = time.perf_counter()
                for _ in range(20):
                    o = step()
                jax.block_until_ready(o)
                r[f"decode step ms, {b} row{'s' if b > 1 else ''}"] = (time.perf_counter() - t) / 20 * 1e3
            out[name] = r
        return out

    blocks, steal = measured(lambda: [block() for _ in range(args.blocks)])
    res = {v: [b[v] for b in blocks] for v in VARIANTS}
    for key in res["kernel"][0]:
        k, one, x = [[r[key] for r in res[v]] for v in VARIANTS]
        best, med = max if "tok/s" in key else min, statistics.median
        speedup = lambda a, b: med(a) / med(b) if "tok/s" in key else med(b) / med(a)
        print(
            f"| {mode}, head {'float32' if head == 'none' else head} (steal {steal:.0%}) | {key} |"
            + "".join(f" {best(v):.1f} / {med(v):.1f} |" for v in (k, one, x))
            + f" {speedup(k, one):.2f}x | {speedup(k, x):.2f}x |",
            flush=True,
        )
    for eng, _ in engines.values():
        eng.close()
print(f"load average after: {os.getloadavg()}")
