"""The training step's temporaries on TPU slices, as the real TPU compiler sizes them without a TPU: the loss makes its
logits a chunk at a time, and split sequences keep their queries split. A file of its own beside
tests/test_slice_compile.py (whose `tiny` configs these use) so that pytest's two workers can share the compiles.
Needs libtpu (the `tpu` extra); where it cannot load, every test here skips with the reason.

    python -m pytest -q tests/test_slice_memory.py"""

import os

os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # a deviceless compile drives no chip: no lock needed
import pytest
from test_slice_compile import tiny

from marin.train.slice_compile import compile_for_slice, tpu_compiler_available

_ok, _why = tpu_compiler_available()
pytestmark = pytest.mark.skipif(not _ok, reason=f"no TPU compiler here: {_why}")


def test_the_loss_makes_its_logits_a_chunk_at_a_time(monkeypatch):
    """8 sequences of 1024 on 4 chips, a vocabulary of 32768: 256 MiB of float32 logits a chip. With a chunk budget of
    16 MiB the loss makes them in 16 chunks (512 positions a chip each): 59 MiB of temporaries. In one piece (the
    loss before chunking) the compiler held 314 MiB, more than the logits. The FLOPs stay the counter's (which
    counts the scan over chunks once, with each chunk's projection again in the backward pass)."""
    import marin.models.transformer as T

    monkeypatch.setattr(T, "LOSS_CHUNK_BYTES", 16 * 2**20)
    assert T.loss_chunks(8, 1024, 32768, devices=4) == 16
    r = compile_for_slice(tiny(batch=8, seq=1024, vocab=32768, d_model=128), "v5e:2x2")
    local_logits = 8 * 1024 * 32768 * 4 / 4
    assert r.temp_bytes < 0.5 * local_logits, r.table()
    assert 0.9 < r.flops_ratio < 1.1, r.table()


def test_split_sequences_keep_their_queries_split_in_grouped_query_attention():
    """4 sequences of 2048 on 8 chips, 4 query heads on 2 key heads: each chip scores its 256 queries of each sequence
    against all keys (`[4, 4, 256, 2048]` float32, 32 MiB). While the reference attention merged the query groups with
    the (split) sequence axis into one, XLA gathered every position's queries on each chip: 89 MiB of temporaries
    then, 49 now."""
    r = compile_for_slice(tiny(batch=4, seq=2048, vocab=256, d_model=256), "v5p:2x2x2")
    assert r.fits and r.mesh["fsdp"] == 8
    assert r.temp_bytes < 64 * 2**20, r.table()
