"""MoE layer vs a dense SwiGLU with the same active parameters (forward+backward), and the dispatch/combine
kernels vs their pure-JAX references. Prints a Markdown table.

    .venv/bin/python bench/moe_layer.py [--tokens 4096] [--d-model 256] [--experts 8] [--top-k 2] [--backend interpret|gpu|tpu]

On CPU the Pallas kernels run in interpret mode (a correctness path, not a speed one); on a GPU pass --backend gpu.
`grouped_matmul=ragged` is `jax.lax.ragged_dot`, which XLA:CPU lowers to a dense masked matmul (E x the work); `blocked`
is the padded-block grouped matmul `auto` picks on CPU. The whole training step is `bench/moe_step.py`.
"""

import argparse, time
import jax, jax.numpy as jnp
from marin.models.transformer import LlamaConfig
from marin.models.moe import MoEConfig, MoEMLP, moe_mlp, sort_by_expert, dispatch_reference, combine_reference, route


def timeit(f, *args, n=5):
    jax.block_until_ready(f(*args))
    t = time.perf_counter()
    for _ in range(n):
        out = f(*args)
    jax.block_until_ready(out)
    return (time.perf_counter() - t) / n * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--d-expert", type=int, default=256)
    ap.add_argument("--backend", default="interpret")
    ap.add_argument("--kernel-tokens", type=int, default=512)
    a = ap.parse_args()
    D, F, E, k, T = a.d_model, a.d_expert, a.experts, a.top_k, a.tokens
    key = jax.random.PRNGKey(0)
    h = jax.random.normal(key, (1, T, D))
    rows = []
    # dense SwiGLU with the same active parameters
    wg, wu, wd = (
        0.02 * jax.random.normal(jax.random.fold_in(key, i), s)
        for i, s in enumerate([(D, k * F), (D, k * F), (k * F, D)])
    )
    dense = jax.jit(jax.grad(lambda w, h: jnp.sum(((jax.nn.silu(h @ w[0]) * (h @ w[1])) @ w[2]) ** 2)))
    t_dense = timeit(dense, (wg, wu, wd), h)
    rows.append(("dense SwiGLU, d_ff = k·F", t_dense))
    for mode, gm in (("dropless", "blocked"), ("dropless", "ragged"), ("capacity", "auto")):
        cfg = LlamaConfig(
            vocab_size=8,
            seq_len=T,
            d_model=D,
            n_layers=1,
            n_heads=1,
            n_kv_heads=1,
            d_ff=F,
            moe=MoEConfig(n_experts=E, top_k=k, dispatch=mode, balance="quantile", grouped_matmul=gm),
        )
        p = MoEMLP.init(cfg, key=key)
        f = jax.jit(jax.grad(lambda p, h: jnp.sum(moe_mlp(cfg, p, h)[0] ** 2)))
        rows.append(
            (
                f"MoE {E}x top-{k} {mode}" + (f", grouped_matmul={gm}" if mode == "dropless" else "") + ", QB",
                timeit(f, p, h),
            )
        )
    # kernels vs references on a smaller token count (interpret mode is slow)
    Tk = a.kernel_tokens
    x = jax.random.normal(key, (Tk, D))
    ids = jax.lax.top_k(jax.random.normal(jax.random.fold_in(key, 9), (Tk, E)), k)[1]
    plan = sort_by_expert(ids, E)
    w = jnp.full((Tk, k), 1.0 / k)
    from marin.models.moe import dispatch_impl

    disp, comb = dispatch_impl(MoEConfig(n_experts=E, top_k=k, kernel="pallas", pallas_backend=a.backend))
    kr = [
        ("dispatch reference (xla gather)", jax.jit(lambda x: dispatch_reference(x, plan.order, k)), x),
        (f"dispatch pallas ({a.backend})", jax.jit(lambda x: disp(x, plan.order, k)), x),
        ("combine reference", jax.jit(lambda y: combine_reference(y, plan.inverse, w)), jnp.tile(x, (k, 1))),
        (f"combine pallas ({a.backend})", jax.jit(lambda y: comb(y, plan.inverse, w)), jnp.tile(x, (k, 1))),
    ]
    print(f"| what (T={T}, D={D}, F={F}, E={E}, k={k}; kernels T={Tk}) | ms | vs dense |\n|---|---:|---:|")
    for name, ms in rows:
        print(f"| {name} | {ms:.2f} | {ms / t_dense:.2f}x |")
    for name, f, arg in kr:
        print(f"| {name} | {timeit(f, arg):.2f} | |")
    print(f"\ndevice: {jax.devices()[0].device_kind}")


if __name__ == "__main__":
    main()
