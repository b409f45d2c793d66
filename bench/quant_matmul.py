"""Which int4 layout makes a memory-bound decode step faster than float32 on XLA:CPU (issue #20, item 2).

Run: .venv/bin/python bench/quant_matmul.py [--batch 1] [--group 64] [--layers 30]

A stack of --layers MLP pairs at the 135M model's shape (576 -> 1536 -> 576, 212 MB of float32 weights at 30
layers: more than any cache, as in a decode step) run in one `fori_loop`, one token row (or --batch rows) through
all of them, weights in each layout; best of 7 repeats, all layouts interleaved in each repeat:

- float32;
- int8, per output channel (`qmatmul`: the int8 matrix cast in the dot, the scale on the output);
- int4 as `Int4Weight` with `qmatmul` (two dots, on the even rows' and the odd rows' nibble planes);
- int4 dequantized back to `[in, out]` first (the planes interleaved again, then one dot: the engine before);
- int4 as JAX's native `jnp.int4` (`s4` in XLA), cast in the dot like int8, one scale per output channel.

The load average is printed: compare the ratios within one run."""

import argparse, os, time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax, jax.numpy as jnp

from marin.serve.quantize import qmatmul, quantize_int4, quantize_int8

ap = argparse.ArgumentParser()
ap.add_argument("--batch", type=int, default=1)
ap.add_argument("--group", type=int, default=64)
ap.add_argument("--layers", type=int, default=30)
args = ap.parse_args()
L, I, O = args.layers, 576, 1536
k1, k2, k3 = jax.random.split(jax.random.PRNGKey(0), 3)
W1, W2 = jax.random.normal(k1, (L, I, O)) / 24, jax.random.normal(k2, (L, O, I)) / 40
x = jax.random.normal(k3, (args.batch, I))


def native_int4(w):
    s = jnp.abs(w).max(-2) / 7
    return jnp.clip(jnp.round(w / s[..., None, :]), -8, 7).astype(jnp.int4), s


LAYOUTS = {
    "float32": (lambda x, w: x @ w, (W1, W2)),
    "int8 (qmatmul)": (qmatmul, (quantize_int8(W1), quantize_int8(W2))),
    "int4 planes (qmatmul)": (qmatmul, (quantize_int4(W1, args.group), quantize_int4(W2, args.group))),
    "int4 interleaved back, one dot": (
        lambda x, w: x @ w.dequantize(x.dtype),
        (quantize_int4(W1, args.group), quantize_int4(W2, args.group)),
    ),
    "int4 as jnp.int4, cast in the dot": (
        lambda x, w: (x @ w[0].astype(x.dtype)) * w[1],
        (native_int4(W1), native_int4(W2)),
    ),
}


def stack(mm):
    def f(x, p):
        def body(i, x):
            a, b = (jax.tree.map(lambda t: t[i], q) for q in p)
            return x + mm(jax.nn.gelu(mm(x, a)), b)

        return jax.lax.fori_loop(0, L, body, x)

    return jax.jit(f)


fns = {n: stack(mm) for n, (mm, _) in LAYOUTS.items()}
ref = None
for n, f in fns.items():
    out = f(x, LAYOUTS[n][1]).block_until_ready()
    ref = out if ref is None else ref
    print(f"{n}: relative error vs float32 {float(jnp.linalg.norm(out - ref) / jnp.linalg.norm(ref)):.3f}", flush=True)
print(f"load average before: {os.getloadavg()}; batch {args.batch}, int4 group {args.group}, {L} layers")
best = dict.fromkeys(fns, float("inf"))
for _ in range(7):
    for n, f in fns.items():
        t = time.perf_counter()
        for _ in range(3):
            out = f(x, LAYOUTS[n][1])
        out.block_until_ready()
        best[n] = min(best[n], (time.perf_counter() - t) / 3)
print(f"load average after: {os.getloadavg()}")
print("| weights | ms per pass | speed vs float32 |\n|---|---|---|")
for n, t in best.items():
    print(f"| {n} | {t * 1e3:.1f} | {best['float32'] / t:.2f}x |")
