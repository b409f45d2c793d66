"""Engine with quantized weights: the KV-cache path equals a full recompute with the dequantized weights, and
quantization changes the model by a bounded amount (int8 much less than int4)."""

import jax, jax.numpy as jnp, numpy as np
import equinox as eqx
import pytest
from marin.models.transformer import LlamaConfig, forward, init
from marin.serve.engine import Engine, SamplingParams
from marin.serve.quantize import Int4Weight, Int8Weight, quantize_model

CFG = LlamaConfig(vocab_size=64, seq_len=64, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=128)


def _dequantized(qm):
    return jax.tree.map(
        lambda w: w.dequantize() if isinstance(w, (Int8Weight, Int4Weight)) else w,
        qm,
        is_leaf=lambda x: isinstance(x, (Int8Weight, Int4Weight)),
    )


@pytest.mark.parametrize("mode", ["int8", "int4"])
def test_quantized_engine_equals_recompute_with_dequantized_weights(mode):
    model = jax.tree.map(lambda a: a * 6 if a.ndim >= 2 else a, init(CFG, key=jax.random.PRNGKey(0)))
    qm = quantize_model(model, mode, group_size=32, include_head=True)
    deq = _dequantized(qm)
    prompts = [[1, 5, 9, 13, 17], [2] * 11]
    with Engine(qm, max_batch=2) as eng:
        outs = eng.generate(prompts, SamplingParams(max_tokens=8, temperature=0.0))
    for p, c in zip(prompts, outs):
        ref = jax.nn.log_softmax(forward(deq, jnp.asarray([p + c.tokens]))[0], -1)
        np.testing.assert_allclose(
            c.logprobs, [float(ref[len(p) - 1 + i, t]) for i, t in enumerate(c.tokens)], atol=1e-4
        )
    toks = jnp.asarray(np.random.default_rng(0).integers(0, 64, (2, 64)))
    base = jax.nn.log_softmax(forward(model, toks), -1)
    kl = float(jnp.mean(jnp.sum(jnp.exp(base) * (base - jax.nn.log_softmax(forward(deq, toks), -1)), -1)))
    assert 0 < kl < (0.01 if mode == "int8" else 0.5), kl  # random O(1) weights: a worst case for 4 bits
