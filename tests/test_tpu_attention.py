"""attention='splash' (JAX's Pallas TPU flash kernel): against the reference in interpret mode over a sharded batch,
and compiled by the real TPU compiler without a TPU (deviceless), alone and inside a whole train step.

The numerics of one device's kernel (causal and windowed masks, segments, GQA, soft-capping; forward and q, k, v
gradients) are checked in `nbs/20a_layers.ipynb`; here the `shard_map` layout over several devices (key heads
repeated), and Mosaic's own checks (tile shapes) that interpret mode does not make. Where libtpu cannot be loaded the
compile tests skip with the reason."""

import os, subprocess, sys, textwrap
import pytest

os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")

import jax, jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P, SingleDeviceSharding

from conftest import tpu_topology as topology, xla_flags


SHARDED = textwrap.dedent(
    """
    import jax, jax.numpy as jnp
    from jax.sharding import Mesh
    from marin.models.layers import (ActivationSharding, SegmentMask, attention_mask, reference_attention,
                                     splash_attention, splash_layout)
    B, S, H, K, dh = 2, 128, 4, 1, 64  # 4 devices: 2 batch shards x 2 head shards, the one key head repeated twice
    assert splash_layout(4, B, H, K) == (2, 2, 2)
    kq, kk, kv, kw = jax.random.split(jax.random.PRNGKey(3), 4)
    q, k, v = (jax.random.normal(kx, (B, S, h, dh)) for kx, h in ((kq, H), (kk, K), (kv, K)))
    w = jax.random.normal(kw, (B, S, H, dh))
    seg = jnp.array([[1] * 77 + [2] * 51, [5] * 128])
    sharding = ActivationSharding(mesh=Mesh(jax.devices(), ("fsdp",)))
    ref = lambda q, k, v: reference_attention(q, k, v, attention_mask(seg))
    spl = lambda q, k, v: splash_attention(q, k, v, SegmentMask(seg, 0, sharding), interpret=True)
    f = lambda g: jax.jit(jax.value_and_grad(lambda *a: jnp.sum(g(*a) * w), (0, 1, 2)))
    (lr, gr), (ls, gs) = f(ref)(q, k, v), f(spl)(q, k, v)
    print("loss", abs(float(lr - ls)) / abs(float(lr)))
    for n, a, b in zip("qkv", gr, gs):
        print(n, float(jnp.abs(a - b).max() / jnp.abs(a).max()))
    print("shard_map" in str(jax.make_jaxpr(spl)(q, k, v)))
    """
)


def test_splash_over_a_sharded_batch_matches_the_reference():
    "4 CPU devices as [2 batch shards, 2 head shards]: the kernel (interpret mode) per device, GQA by repeated keys."
    env = dict(os.environ, XLA_FLAGS=xla_flags("--xla_force_host_platform_device_count=4"), JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", SHARDED], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.split("\n")
    errs = {l.split()[0]: float(l.split()[1]) for l in lines if l[:2] in ("lo", "q ", "k ", "v ")}
    assert set(errs) == {"loss", "q", "k", "v"} and max(errs.values()) < 1e-5, errs
    assert "True" in lines  # the kernel ran inside a shard_map


def _on(chip: str, shape, dtype):
    return jax.ShapeDtypeStruct(shape, dtype, sharding=SingleDeviceSharding(topology(chip).devices[0]))


@pytest.mark.parametrize("chip", ["v5e:2x2", "v5p:2x2x1", "v6e:2x2"])
def test_splash_compiles_for_tpu(chip):
    "Forward and backward through Mosaic: head size 128, a window, segments, GQA, soft-capping, bfloat16."
    from marin.models.layers import SegmentMask, splash_attention
    from marin.train.slice_compile import traced_for

    B, S, H, K, dh = 2, 512, 4, 2, 128

    def loss(q, k, v, seg):
        out = splash_attention(q, k, v, SegmentMask(seg, 200), scale=0.1, logit_cap=30.0)
        return jnp.sum(out.astype(jnp.float32))

    args = [_on(chip, (B, S, h, dh), jnp.bfloat16) for h in (H, K, K)] + [_on(chip, (B, S), jnp.int32)]
    with traced_for("tpu"):
        compiled = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(*args).compile()
    assert compiled.as_text().count('custom_call_target="tpu_custom_call"') >= 3  # forward, dq, dk/dv


def _tiny_step(attention: str):
    "A tiny dense train step (the trainer's own functions) traced for TPU and compiled for v5e 2x2 (FSDP 4)."
    from marin.models.transformer import LlamaConfig
    from marin.train.optim import build_optimizer
    from marin.train.sharding import MeshConfig, make_mesh
    from marin.train.slice_compile import abstract_batch, traced_for
    from marin.train.trainer import SyntheticDataConfig, TrainConfig, abstract_state, make_train_step, state_shardings

    S = 512
    model = LlamaConfig(
        vocab_size=256, seq_len=S, d_model=256, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=256, attention=attention
    )
    cfg = TrainConfig(
        model=model,
        data=SyntheticDataConfig(vocab_size=256, batch_size=4, seq_len=S),
        compute_dtype="bfloat16",
        remat="block",
        mesh=MeshConfig(data=1, fsdp=-1),
        num_train_steps=10,
    )
    mesh = make_mesh(cfg.mesh, devices=topology("v5e:2x2").devices)
    opt, schedule = build_optimizer(cfg.optimizer, cfg.num_train_steps)
    with traced_for("tpu"):
        step = make_train_step(cfg, mesh, opt, schedule, state_shardings(cfg, mesh, opt))
        return step.lower(abstract_state(cfg, mesh, opt), abstract_batch(cfg, mesh)).compile()


def test_train_step_with_auto_attention_runs_the_kernel_on_tpu():
    """The TPU presets' `auto`: the kernel in the step traced for TPU, no [S, S] arrays; the reference's step has them.
    (At this size the kernel's step is not smaller: its block masks and tiles outweigh 2 MiB of scores; the 8b preset's
    side by side is in BENCHMARKS.md, `bench/tpu_attention.py`.)"""
    auto, ref = _tiny_step("auto"), _tiny_step("reference")
    assert auto.as_text().count('custom_call_target="tpu_custom_call"') >= 3
    assert 'custom_call_target="tpu_custom_call"' not in ref.as_text()
    assert "512,512]" in ref.as_text() and "512,512]" not in auto.as_text()  # S x S arrays: the reference's only
