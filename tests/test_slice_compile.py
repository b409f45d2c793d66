"""Tiny training steps compiled by the real TPU compiler for v5e and v5p slices (one host, several hosts, two slices
over DCN), without a TPU. Needs libtpu (the `tpu` extra); where it cannot load, every test here skips with the reason.

    python -m pytest -q tests/test_slice_compile.py"""

import os

os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # a deviceless compile drives no chip: no lock needed
import pytest
from marin.models.transformer import LlamaConfig
from marin.train.optim import OptimizerConfig
from marin.train.sharding import MeshConfig, ShardingError
from marin.train.slice_compile import compile_for_slice, estimate_per_chip, parse_target, tpu_compiler_available
from marin.train.trainer import SyntheticDataConfig, TrainConfig

_ok, _why = tpu_compiler_available()
pytestmark = pytest.mark.skipif(not _ok, reason=f"no TPU compiler here: {_why}")


def tiny(batch=8, seq=64, mesh=MeshConfig(data=1, fsdp=-1), vocab=512, d_model=128, **kw) -> TrainConfig:
    model = LlamaConfig(
        vocab_size=vocab, seq_len=seq, d_model=d_model, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=2 * d_model
    )
    return TrainConfig(
        model=model,
        data=SyntheticDataConfig(vocab_size=vocab, batch_size=batch, seq_len=seq),
        optimizer=OptimizerConfig(learning_rate=1e-3, warmup=0),
        num_train_steps=10,
        compute_dtype="bfloat16",
        remat="block",
        mesh=mesh,
        **kw,
    )


def small() -> TrainConfig:
    """Small, with ~9 MiB of training state per chip: enough that the TPU layouts' padding of the small vectors (norms,
    ~0.1 MiB) stays under 2% of the arguments, and that the estimate's activations bound the compiler's fixed
    temporaries (~7 MiB). `tiny()` fails both (its state: 1.2 MiB of 1.3 MiB of arguments; its temporaries: 5 MiB
    against an estimate of 3.4 MiB of everything). A short sequence: the TPU compiler's time grows with the logits
    (16 x 512 x 8192: 80 CPU s; this one: 20), and what these tests check is the state."""
    return tiny(batch=8, seq=64, vocab=4096, d_model=256)


@pytest.fixture(scope="module")
def v5e():
    return compile_for_slice(small(), "v5e:2x2")


def test_v5e_step_compiles_with_the_state_sharded(v5e):
    r = v5e
    assert r.fits and r.mesh["fsdp"] == 4 and r.target.devices == 4 and r.hosts == 1
    n = small().model.n_params
    state = 12 * n / 4  # float32 parameters and two Adam moments, split over 4 FSDP devices
    assert state <= r.argument_bytes <= 1.5 * state, (r.argument_bytes, state)
    assert r.alias_bytes >= 0.9 * state  # the donated state is written in place
    assert r.total_bytes == r.argument_bytes + r.temp_bytes + r.output_bytes - r.alias_bytes
    assert 0.9 < r.flops_ratio < 1.1, r.table()  # the compiler's FLOPs are the lab counter's
    assert "v5e-4" in r.table() and "fits" in r.table()


def test_estimate_against_the_compiler(v5e):
    """The state is what the compiler takes as arguments; the whole estimate bounds the compiler's bytes from above.
    (Within 10% holds for the presets, whose logits and attention scores are GBs: bench/tpu_presets.py. A program
    this small keeps its temporaries, logits included, in the chip's 128 MiB of VMEM, which the estimate ignores.)"""
    est = estimate_per_chip(small(), "v5e:2x2")
    assert 0.98 <= (est.state + est.batch) / v5e.argument_bytes <= 1.02, (est, v5e.table())
    assert est.total >= v5e.total_bytes, (est, v5e.table())


def test_batch_too_small_for_the_devices_goes_to_the_sequence():
    """4 sequences on 8 FSDP devices (v5p 2x2x2, 2 hosts): each device takes half of two sequences, in the compute and
    in the bytes. While `dense` flattened `[B, S]` (S split, B not) before the matmul, XLA replicated the logits'
    gradient (the 8b preset: 48 GiB a chip); this step's temporaries were then 82 MiB, now 42 (its float32 logits
    per device: 16 MiB)."""
    B, S, V = 4, 512, 16384
    r = compile_for_slice(tiny(batch=B, seq=S, vocab=V, d_model=256), "v5p:2x2x2")
    assert r.fits and r.mesh["fsdp"] == 8
    assert r.hosts == 2 and r.target.devices == 8  # the multi-host slice (test_multi_host_and_two_slices_over_dcn)
    assert 0.9 < r.flops_ratio < 1.1, r.table()  # replicated, it would be ~2
    local_logits = B * S * V * 4 / 8
    assert r.temp_bytes < 4 * local_logits, r.table()


def test_batch_that_fits_nowhere_is_refused_before_compiling():
    with pytest.raises(ShardingError, match=r"batch dimension \(2\).*fsdp=4.*nor does the sequence \(63\)"):
        compile_for_slice(tiny(batch=2, seq=63), "v5e:2x2")


def test_multi_host_and_two_slices_over_dcn():
    """v5p:2x2x2 spans 2 hosts (its compile, 8 devices on 2 hosts: test_batch_too_small_for_the_devices_goes_to_the_
    sequence, which compiles for that slice anyway); two v5e 2x2 slices over DCN: data=2 (one per slice) x fsdp=4."""
    two = compile_for_slice(tiny(mesh=MeshConfig(data=2, fsdp=-1)), parse_target("v5e:2x2", slices=2))
    assert two.fits and two.hosts == 2 and two.mesh["data"] == 2 and two.mesh["fsdp"] == 4
    assert two.target.name == "2x v5e-4"


def test_marin_train_dry_run_target_compiles_for_the_slice(capsys, monkeypatch, tmp_path):
    "`marin train --dry-run --target`: the estimate and the TPU compiler's own table, exit 0 when it fits."
    from typer.testing import CliRunner
    from marin.train.cli import app

    monkeypatch.setenv("MARIN_PREFIX", str(tmp_path / "store"))
    r = CliRunner().invoke(app, ["train", "--config", "nano", "--dry-run", "--target", "v5e-4"])
    assert r.exit_code == 0, r.output
    assert "estimate per device on v5e-4" in r.output and "slice: v5e-4 (v5e:2x2, 4 devices" in r.output
    assert "(compiler) vs" in r.output and "compile" in r.output and "fits" in r.output
