"""Importing a published checkpoint as a step: a folder that `transformers` wrote becomes a lab checkpoint whose
model gives the same logits, cached by the checksums of its files (two copies of one folder are one output)."""

import shutil
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from marin.core.executor import Executor
from marin.models.io import load_model
from marin.models.pretrained import import_step
from marin.models.transformer import forward
from conftest import tiny_transformers_model


def test_transformers_folder_imports_as_a_cached_lab_checkpoint(tmp_path):
    hf = tiny_transformers_model("Qwen2", tie_word_embeddings=True)
    hf.save_pretrained(tmp_path / "hub" / "qwen2", safe_serialization=True)
    shutil.copytree(tmp_path / "hub" / "qwen2", tmp_path / "elsewhere")
    ex = Executor(prefix=str(tmp_path / "store"))
    step = import_step(str(tmp_path / "hub" / "qwen2"))
    out = ex.run([step])[step]
    again = import_step(f"file://{tmp_path / 'elsewhere'}", name="qwen2")
    assert again.output_name == step.output_name and ex.run([again])[again] == out
    model, meta = load_model(out)
    assert meta["architecture"] == "Qwen2ForCausalLM" and model.cfg.qkv_bias and model.cfg.tie_embeddings
    toks = np.random.default_rng(0).integers(0, 80, (2, 40))
    with torch.no_grad():
        theirs = hf(torch.tensor(toks)).logits.numpy()
    np.testing.assert_allclose(np.asarray(forward(model, jnp.asarray(toks))), theirs, atol=1e-4, rtol=1e-4)
