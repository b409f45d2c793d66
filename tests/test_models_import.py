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


def test_transformers_folder_imports_as_a_cached_lab_checkpoint(tmp_path):
    torch.manual_seed(0)
    hcfg = transformers.Qwen2Config(
        vocab_size=80,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=True,
    )
    hf = transformers.Qwen2ForCausalLM(hcfg).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(torch.randn_like(p) * 0.3)
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
