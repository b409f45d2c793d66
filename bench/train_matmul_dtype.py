"""The `nano` train step (`shakespeare_char`'s shape) with float32 products against `LlamaConfig.matmul_dtype=
"bfloat16"` (issue #22), interleaved in one process, and the products alone.

Three steps, each the trainer's own (`setup_training(cfg).step`, the microbatches on host threads), timed in
interleaved blocks of 40 steps: float32 products; bfloat16 products as `marin.models.layers.bf16_product` runs them
(the weight gradient `xᵀ g` from `materialised_transpose`); and bfloat16 products with `xᵀ` behind an
`optimization_barrier` instead (the version before 2026-12-06, whose weight gradients XLA:CPU ran in float32). Then
each product of one `dense` at the step's shapes, alone (best of 5 runs of 300 calls): the forward `x w`, `dx = g
wᵀ` and `dw = xᵀ g`, in float32 and bfloat16 operands, and which operand dtype XLA compiled `dw`'s product to.

    .venv/bin/python bench/train_matmul_dtype.py [--blocks 6]"""

import argparse, os

import jax, jax.numpy as jnp

import marin.models.layers as L
from marin.train.cli import PRESETS

from _nano_steps import best_ms, interleave, report, warmed


def best_us(f, *args) -> float:
    "Best of 5 runs of 300 calls of jitted `f`, µs per call."
    return 1e3 * best_ms(f, args, 1500)


def dw_dtypes(f, *args) -> str:
    "The operand dtypes XLA compiled `f`'s (one) product to."
    return " x ".join(L.product_dtypes(f, *args)[0])


def products(tokens: int, d: int, f: int) -> None:
    "One `dense` [tokens, d] x [d, f]: its three products alone, float32 and bfloat16 operands."
    k = jax.random.split(jax.random.PRNGKey(0), 3)
    x, w, g = (
        jax.random.normal(k[0], (tokens, d)),
        jax.random.normal(k[1], (d, f)),
        jax.random.normal(k[2], (tokens, f)),
    )
    bf, f32 = jnp.bfloat16, jnp.float32
    xb, wb, gb = x.astype(bf), w.astype(bf), g.astype(bf)
    mm = lambda a, b: jnp.dot(a, b, preferred_element_type=f32)
    fwd = (best_us(jax.jit(mm), x, w), best_us(jax.jit(mm), xb, wb))
    dx = jax.jit(lambda g, w: jax.lax.dot_general(g, w, (((1,), (1,)), ((), ())), preferred_element_type=f32))
    dxs = (best_us(dx, g, w), best_us(dx, gb, wb))
    folded = lambda x, g: mm(jax.lax.optimization_barrier(x.T), g)
    split = lambda x, g: mm(L.materialised_transpose(x), g)
    dws = (best_us(jax.jit(folded), x, g), best_us(jax.jit(folded), xb, gb), best_us(jax.jit(split), xb, gb))
    print(
        f"| [{tokens},{d}] x [{d},{f}] | {fwd[0]:.0f} / {fwd[1]:.0f} | {dxs[0]:.0f} / {dxs[1]:.0f} | {dws[0]:.0f} / "
        f"{dws[1]:.0f} ({dw_dtypes(folded, xb, gb)}) | {dws[2]:.0f} ({dw_dtypes(split, xb, gb)}) |"
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", type=int, default=6)
    a = ap.parse_args()
    print(f"load {os.getloadavg()}")
    nano = PRESETS["nano"]()
    model = nano.model
    runs = {
        "float32 products": warmed(model=model),
        "bfloat16 products": warmed(model=model.replace(matmul_dtype="bfloat16")),
    }
    split = L.materialised_transpose
    L.materialised_transpose = lambda x: jax.lax.optimization_barrier(x.T)  # traced now: the barrier version
    try:
        runs["bfloat16, x^T behind a barrier"] = warmed(model=model.replace(matmul_dtype="bfloat16"))
    finally:
        L.materialised_transpose = split
    interleave(runs, a.blocks, 40)
    report(runs)
    tokens = nano.data.batch_size * nano.data.seq_len // nano.grad_accum  # one microbatch
    print(
        f"\nproducts alone, µs (float32 / bfloat16 operands), {tokens} tokens; load {os.getloadavg()}\n"
        "| product | x w | dx = g wᵀ | dw = xᵀ g, xᵀ behind a barrier | dw, materialised_transpose |\n"
        "|---|---:|---:|---:|---:|"
    )
    for d, f in ((model.d_model, model.d_model), (model.d_model, model.d_ff), (model.d_ff, model.d_model)):
        products(tokens, d, f)


if __name__ == "__main__":
    main()
