"""The MoE Pallas kernels and a whole MoE train step compiled for real TPU slices, without a TPU (deviceless AOT).

`jax.experimental.topologies` gives abstract TPU devices when libtpu is installed; `jit(...).lower(...).compile()`
then runs the real TPU compiler, Mosaic included, which checks what interpret mode does not (block shapes, tiling,
DMA alignment). Where libtpu cannot be loaded (not installed, another OS or CPU) every test here skips with the
reason. Run them with libtpu installed: `python -m pytest tests/test_tpu_kernels.py`."""

import os
import pytest

# Several processes (pytest workers, a notebook, a bench) may load libtpu at once; with no TPU attached there is no
# device to guard, so its one-process lock file is not needed.
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")

import jax, jax.numpy as jnp
from jax.sharding import SingleDeviceSharding

from conftest import tpu_topology as topology


def on_chip(name: str, shape, dtype):
    return jax.ShapeDtypeStruct(shape, dtype, sharding=SingleDeviceSharding(topology(name).devices[0]))


CHIPS = ["v5e:2x2", "v5p:2x2x1", "v6e:2x2"]


@pytest.mark.parametrize("chip", CHIPS)
def test_dispatch_combine_compile_for_tpu(chip):
    """The TPU kernels, forward and backward (the custom VJPs), through Mosaic: block shapes, DMAs, bf16 word rows.
    float32 and bfloat16 in one program (one compile a chip): Mosaic compiles each kernel call on its own, so either
    dtype's kernel that breaks a rule fails the whole compile."""
    from marin.kernels.moe_dispatch import make_dispatch_combine

    disp, comb = make_dispatch_combine("prefetch", interpret=False)
    T, k, D = 13, 2, 256  # an odd token count: the bfloat16 path pads a row; 26 rows: a padded last block

    def loss(x, order, w):
        inverse = jnp.zeros_like(order).at[order].set(jnp.arange(order.shape[0], dtype=order.dtype))
        return jnp.sum(comb(jnp.tanh(disp(x, order, k)), inverse, w).astype(jnp.float32))

    def both(x32, x16, order, w):
        return loss(x32, order, w) + loss(x16, order, w)

    dtypes = (jnp.float32, jnp.bfloat16)
    args = (
        *(on_chip(chip, (T, D), dt) for dt in dtypes),
        on_chip(chip, (T * k,), jnp.int32),
        on_chip(chip, (T, k), jnp.float32),
    )
    compiled = jax.jit(jax.value_and_grad(both, argnums=(0, 1, 3))).lower(*args).compile()
    text = compiled.as_text()
    # per dtype: gather, combine; backward: combine, 2 gathers
    assert text.count('custom_call_target="tpu_custom_call"') >= 2 * 5
    assert compiled.cost_analysis()["bytes accessed"] > 0


def test_mosaic_still_refuses_one_row_blocks():
    "The control: the old kernels' `(1, D)` blocks fail here, so the compiles above are a real check."
    from jax.experimental import pallas as pl

    def copy(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    def one_row(x):
        spec = pl.BlockSpec((1, 3), lambda i: (i, 0))  # neither divisible by (8, 128) nor the whole array
        shape = jax.ShapeDtypeStruct(x.shape, x.dtype)
        return pl.pallas_call(copy, grid=(16,), in_specs=[spec], out_specs=spec, out_shape=shape)(x)

    with pytest.raises(Exception, match="divisible by 8 and 128"):
        jax.jit(one_row).lower(on_chip("v5e:2x2", (16, 256), jnp.float32)).compile()


def _tiny_moe_step(name: str, kernel: str, expert: int, data: int = -1):
    "A whole tiny MoE train step (model, optimizer, shardings from the lab's own functions) compiled for `name`."
    from marin.models.moe import MoEConfig
    from marin.models.transformer import LlamaConfig
    from marin.train.optim import build_optimizer
    from marin.train.sharding import MeshConfig, batch_sharding, make_mesh
    from marin.train.trainer import (
        SyntheticDataConfig,
        TrainConfig,
        abstract_state,
        make_train_step,
        state_shardings,
    )

    B, S = 8, 32
    moe = MoEConfig(n_experts=8, top_k=2, kernel=kernel, pallas_backend="tpu", balance="none")
    model = LlamaConfig(vocab_size=256, seq_len=S, d_model=128, n_layers=1, n_heads=2, n_kv_heads=2, d_ff=256, moe=moe)
    cfg = TrainConfig(
        model=model,
        data=SyntheticDataConfig(vocab_size=256, batch_size=B, seq_len=S),
        compute_dtype="bfloat16",
        mesh=MeshConfig(data=data, expert=expert),
        num_train_steps=10,
    )
    mesh = make_mesh(cfg.mesh, devices=topology(name).devices)
    opt, schedule = build_optimizer(cfg.optimizer, cfg.num_train_steps)
    step = make_train_step(cfg, mesh, opt, schedule, state_shardings(cfg, mesh, opt))
    shape = (1, B, S)
    bs = batch_sharding(mesh, shape, cfg.mesh.rules)
    batch = {
        "tokens": jax.ShapeDtypeStruct(shape, jnp.int32, sharding=bs),
        "segment_ids": jax.ShapeDtypeStruct(shape, jnp.int32, sharding=bs),
        "loss_mask": jax.ShapeDtypeStruct(shape, jnp.float32, sharding=bs),
    }
    return mesh, step.lower(abstract_state(cfg, mesh, opt), batch).compile()


def test_moe_train_step_with_pallas_compiles_for_a_multihost_slice_with_expert_parallelism():
    "v5p 2x2x2: 8 chips on 2 hosts, experts split 8 ways, the Pallas dispatch/combine and megablox gmm inside."
    mesh, compiled = _tiny_moe_step("v5p:2x2x2", "pallas", expert=8)
    assert len({d.process_index for d in mesh.devices.flat}) == 2 and mesh.shape["expert"] == 8
    text = compiled.as_text()
    assert "all-to-all" in text  # tokens travel to their experts' devices
    assert text.count('custom_call_target="tpu_custom_call"') >= 10  # dispatch/combine and gmm, forward and backward
    assert "ragged-dot" not in text  # the TPU grouped matmul is gmm, not the dense-gradient ragged_dot
    mem = compiled.memory_analysis()
    assert 0 < mem.argument_size_in_bytes < 16 << 20


def test_moe_train_step_with_pallas_compiles_with_data_and_expert_axes():
    "v5e 2x2 as data 2 x expert 2: the batch over both axes, each device's tokens through the kernels."
    mesh, compiled = _tiny_moe_step("v5e:2x2", "pallas", expert=2, data=2)
    assert mesh.shape["data"] == mesh.shape["expert"] == 2
    assert compiled.as_text().count('custom_call_target="tpu_custom_call"') >= 10


@pytest.mark.parametrize("kernel", ["xla", "pallas"])
def test_moe_on_a_data_only_mesh_runs_each_devices_own_rows(kernel):
    """v5e 2x2 as data 4, experts not split: each chip sorts and runs its own 2 sequences' routed rows (128 of them),
    never the whole batch's 512 (left to XLA, the sort by expert was not partitioned and every chip ran all rows)."""
    import re

    mesh, compiled = _tiny_moe_step("v5e:2x2", kernel, expert=1, data=4)
    assert mesh.shape["data"] == 4 and mesh.shape["expert"] == 1
    text = compiled.as_text()
    rows = {int(n) for n in re.findall(r"bf16\[(\d+),128\]", text)}  # [rows, d_model] activations
    assert 128 in rows and not any(n >= 512 for n in rows), sorted(rows)
    assert "all-to-all" not in text
    if kernel == "pallas":
        assert text.count('custom_call_target="tpu_custom_call"') >= 10
