"""The MoE layer's Pallas path against its XLA path on TPU, measured by the TPU compiler itself (deviceless AOT: no TPU
needed, libtpu installed). For each chip: one MoE layer forward+backward on one chip, the dispatch/combine alone, and
a whole tiny MoE train step on a slice with expert parallelism; per program the compiler's FLOPs, bytes accessed,
temporaries per chip and the compile time. Prints a Markdown section (the one in BENCHMARKS.md).

    ALLOW_MULTIPLE_LIBTPU_LOAD=1 JAX_PLATFORMS=cpu /tmp/tpuvenv/bin/python bench/moe_tpu_compile.py [--chips v5e v5p]

What the numbers are: `cost_analysis()` FLOPs and bytes are the compiler's for XLA's own ops; a Pallas (Mosaic) call
is opaque to it and counts what the kernel declares (`pl.CostEstimate`: ours for dispatch/combine, megablox's for
gmm), so a Pallas row's bytes are partly the kernel's own claim. Temporaries (`memory_analysis()`) are the
compiler's own for every program. None of this is a time: the cost model's `optimal_seconds` is not reported.
"""

import argparse, os, time

os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # no TPU attached: nothing for libtpu's lock to guard
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax, jax.numpy as jnp
from jax.experimental import topologies
from jax.sharding import SingleDeviceSharding

from marin.models.moe import MoEConfig, MoEMLP, dispatch_impl, moe_mlp
from marin.models.transformer import LlamaConfig
from marin.train.optim import build_optimizer
from marin.train.sharding import MeshConfig, batch_sharding, make_mesh
from marin.train.trainer import SyntheticDataConfig, TrainConfig, abstract_state, make_train_step, state_shardings

TOPOLOGY = {"v5e": ("v5e:2x2", 4), "v5p": ("v5p:2x2x2", 8), "v6e": ("v6e:2x2", 4), "v4": ("v4:2x2x2", 8)}
PATHS = {  # name -> MoEConfig fields
    "xla gather + gmm": dict(kernel="xla"),
    "pallas + gmm": dict(kernel="pallas", pallas_backend="tpu"),
    "xla gather + ragged_dot": dict(kernel="xla", grouped_matmul="ragged"),
}


def numbers(lowered) -> dict:
    t = time.perf_counter()
    c = lowered.compile()
    secs = time.perf_counter() - t
    ca, ma = c.cost_analysis(), c.memory_analysis()
    return {
        "gflop": ca.get("flops", 0) / 1e9,
        "gb": ca.get("bytes accessed", 0) / 1e9,
        "temp_mib": ma.temp_size_in_bytes / 2**20,
        "s": secs,
    }


def layer_cfg(a, **moe) -> LlamaConfig:
    m = MoEConfig(n_experts=a.experts, top_k=a.top_k, d_expert=a.d_expert, balance="none", **moe)
    return LlamaConfig(
        vocab_size=1024, seq_len=a.seq, d_model=a.d_model, n_layers=1, n_heads=8, n_kv_heads=8, d_ff=a.d_expert, moe=m
    )


def one_layer(a, chip: str, moe: dict) -> dict:
    "An MoE layer, forward and backward (weights and input), bf16, on one chip."
    cfg = layer_cfg(a, **moe)
    dev = SingleDeviceSharding(topologies.get_topology_desc(platform="tpu", topology_name=TOPOLOGY[chip][0]).devices[0])
    p = jax.eval_shape(lambda: MoEMLP.init(cfg, key=jax.random.PRNGKey(0)))
    p = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, jnp.bfloat16, sharding=dev), p)
    h = jax.ShapeDtypeStruct((a.batch, a.seq, a.d_model), jnp.bfloat16, sharding=dev)
    loss = lambda p, h: jnp.sum(moe_mlp(cfg, p, h)[0].astype(jnp.float32) ** 2)
    return numbers(jax.jit(jax.grad(loss, argnums=(0, 1))).lower(p, h))


def dispatch_combine(a, chip: str, moe: dict) -> dict:
    "Dispatch then combine, forward and backward, for a given expert order: the kernels' own share of the layer."
    m = MoEConfig(n_experts=a.experts, top_k=a.top_k, **moe)
    dev = SingleDeviceSharding(topologies.get_topology_desc(platform="tpu", topology_name=TOPOLOGY[chip][0]).devices[0])
    T, D, k = a.batch * a.seq, a.d_model, a.top_k
    disp, comb = dispatch_impl(m)

    def loss(x, w, order, inverse):
        return jnp.sum(comb(disp(x, order, k), inverse, w.astype(x.dtype)).astype(jnp.float32) ** 2)

    S = lambda shape, dt: jax.ShapeDtypeStruct(shape, dt, sharding=dev)
    args = S((T, D), jnp.bfloat16), S((T, k), jnp.float32), S((T * k,), jnp.int32), S((T * k,), jnp.int32)
    return numbers(jax.jit(jax.grad(loss, argnums=(0, 1))).lower(*args))


def train_step(a, chip: str, moe: dict) -> dict:
    "A whole train step (2 MoE layers, AdamW) on the chip's slice, experts split over every chip of it."
    name, n = TOPOLOGY[chip]
    model = layer_cfg(a, **moe).replace(n_layers=2, seq_len=a.step_seq)
    B = a.step_batch
    cfg = TrainConfig(
        model=model,
        data=SyntheticDataConfig(vocab_size=1024, batch_size=B, seq_len=a.step_seq),
        compute_dtype="bfloat16",
        mesh=MeshConfig(data=1, expert=n),
        num_train_steps=10,
    )
    mesh = make_mesh(cfg.mesh, devices=topologies.get_topology_desc(platform="tpu", topology_name=name).devices)
    opt, schedule = build_optimizer(cfg.optimizer, cfg.num_train_steps)
    step = make_train_step(cfg, mesh, opt, schedule, state_shardings(cfg, mesh, opt))
    shape = (1, B, a.step_seq)
    bs = batch_sharding(mesh, shape, cfg.mesh.rules)
    batch = {
        k: jax.ShapeDtypeStruct(shape, jnp.float32 if k == "loss_mask" else jnp.int32, sharding=bs)
        for k in ("tokens", "segment_ids", "loss_mask")
    }
    return numbers(step.lower(abstract_state(cfg, mesh, opt), batch))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--chips", nargs="+", default=["v5e", "v5p"], choices=sorted(TOPOLOGY))
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--d-model", type=int, default=1024)
    ap.add_argument("--d-expert", type=int, default=1024)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--step-batch", type=int, default=16)
    ap.add_argument("--step-seq", type=int, default=256)
    ap.add_argument("--skip-step", action="store_true")
    a = ap.parse_args()
    progs = [("dispatch+combine", dispatch_combine), ("MoE layer", one_layer)]
    if not a.skip_step:
        progs.append(("train step", train_step))
    print(f"jax {jax.__version__}; layer: {a.batch}x{a.seq} tokens, d_model {a.d_model}, {a.experts} experts of")
    print(f"width {a.d_expert}, top-{a.top_k}, bf16, fwd+bwd on one chip; train step: 2 such layers (seq {a.step_seq},")
    print(
        f"batch {a.step_batch}), AdamW, experts split over the slice ({', '.join(TOPOLOGY[c][0] for c in a.chips)})\n"
    )
    print("| chip | program | path | GFLOP | GB accessed | temporaries MiB/chip | compile s |")
    print("|---|---|---|---:|---:|---:|---:|")
    for chip in a.chips:
        for prog, fn in progs:
            for path, moe in PATHS.items():
                if prog == "dispatch+combine" and "ragged" in path:
                    continue  # no grouped matmul in it
                try:
                    r = fn(a, chip, moe)
                except Exception as e:  # say which one did not compile, keep going
                    print(f"| {chip} | {prog} | {path} | failed: {type(e).__name__}: {str(e)[:120]} | | | |")
                    continue
                print(
                    f"| {chip} | {prog} | {path} | {r['gflop']:.2f} | {r['gb']:.3f} | {r['temp_mib']:.1f} | {r['s']:.1f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
