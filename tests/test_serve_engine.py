"""Engine with quantized weights: the KV-cache path equals a full recompute with the dequantized weights, and
quantization changes the model by a bounded amount (int8 much less than int4)."""

import dataclasses
import jax, jax.numpy as jnp, numpy as np
import equinox as eqx
import pytest
from marin.models.transformer import LlamaConfig, forward, init
from marin.serve.engine import Engine, SamplingParams
from marin.serve.quantize import Int4Weight, Int8Weight, quantize_model

CFG = LlamaConfig(vocab_size=64, seq_len=64, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=128)
# the recompute as one compiled program per sequence length (op by op, each new length compiled every op again)
forward_jit = jax.jit(forward)


def _dequantized(qm):
    return jax.tree.map(
        lambda w: w.dequantize() if isinstance(w, (Int8Weight, Int4Weight)) else w,
        qm,
        is_leaf=lambda x: isinstance(x, (Int8Weight, Int4Weight)),
    )


@pytest.mark.parametrize("mode", ["int8", "int4", "int4-min"])
def test_quantized_engine_equals_recompute_with_dequantized_weights(mode):
    model = jax.tree.map(lambda a: a * 6 if a.ndim >= 2 else a, init(CFG, key=jax.random.PRNGKey(0)))
    qm = quantize_model(model, mode, group_size=32, head=mode)
    deq = _dequantized(qm)
    prompts = [[1, 5, 9, 13, 17], [2] * 11]
    with Engine(qm, max_batch=2) as eng:
        outs = eng.generate(prompts, SamplingParams(max_tokens=8, temperature=0.0))
    for p, c in zip(prompts, outs):
        ref = jax.nn.log_softmax(forward_jit(deq, jnp.asarray([p + c.tokens]))[0], -1)
        np.testing.assert_allclose(
            c.logprobs, [float(ref[len(p) - 1 + i, t]) for i, t in enumerate(c.tokens)], atol=1e-4
        )
    toks = jnp.asarray(np.random.default_rng(0).integers(0, 64, (2, 64)))
    base = jax.nn.log_softmax(forward_jit(model, toks), -1)
    kl = float(jnp.mean(jnp.sum(jnp.exp(base) * (base - jax.nn.log_softmax(forward_jit(deq, toks), -1)), -1)))
    assert 0 < kl < (0.01 if mode == "int8" else 0.5), kl  # random O(1) weights: a worst case for 4 bits


@pytest.mark.parametrize("variant", [dict(qkv_bias=True), dict(sliding_window=4)])
def test_engine_serves_architecture_variants_like_the_model(variant):
    "Qwen2's q/k/v biases and Mistral's sliding window in the KV-cache path: prefill and decode equal forward."
    cfg = CFG.replace(**variant)
    model = jax.tree.map(lambda a: a * 6 if a.ndim >= 2 else a, init(cfg, key=jax.random.PRNGKey(0)))
    if cfg.qkv_bias:  # zero at init: give them values that change the attention
        ks = jax.random.split(jax.random.PRNGKey(3), 3)
        new = tuple(
            jax.random.normal(k, b.shape) for k, b in zip(ks, (model.blocks.bq, model.blocks.bk, model.blocks.bv))
        )
        model = eqx.tree_at(lambda m: (m.blocks.bq, m.blocks.bk, m.blocks.bv), model, new)
    prompts = [[1, 5, 9, 13, 17, 21, 25], [2] * 11]  # longer than the window: prefill and decode both cross it
    with Engine(model, max_batch=2) as eng:
        outs = eng.generate(prompts, SamplingParams(max_tokens=8, temperature=0.0))
    plain = dataclasses.replace(model, cfg=CFG)  # the same weights without the variant: must differ
    for p, c in zip(prompts, outs):
        seq = jnp.asarray([p + c.tokens])
        ref = jax.nn.log_softmax(forward_jit(model, seq)[0], -1)
        got = [float(ref[len(p) - 1 + i, t]) for i, t in enumerate(c.tokens)]
        np.testing.assert_allclose(c.logprobs, got, atol=1e-4)
        if cfg.sliding_window:
            other = jax.nn.log_softmax(forward_jit(plain, seq)[0], -1)
            assert max(abs(float(other[len(p) - 1 + i, t]) - g) for i, (t, g) in enumerate(zip(c.tokens, got))) > 1e-3


@pytest.mark.parametrize("mode", ["none", "int8", "int4", "int4-min"])
def test_one_sequence_decode_goes_through_the_row_vector_kernel(monkeypatch, mode):
    """One sequence: the block matrices (read in place in their stacks; float32 or quantized) and a quantized head go
    through the CPU row-vector kernels. Same tokens and log-probabilities as a recompute with the dequantized weights, and as the
    engine with the kernel switched off (XLA's convert and dot)."""
    from marin.kernels.cpu_rowvec import rowvec_available
    from marin.serve import engine as E

    if not rowvec_available():
        pytest.skip("the row-vector kernel does not run here (no C++ compiler, or not the CPU backend)")
    model = jax.tree.map(lambda a: a * 6 if a.ndim >= 2 else a, init(CFG, key=jax.random.PRNGKey(0)))
    qm = model if mode == "none" else quantize_model(model, mode, group_size=32, head=mode)
    kernel_name = f"marin_{ {'none': 'f32', 'int8': 'int8', 'int4': 'int4', 'int4-min': 'int4_min'}[mode] }_rowvec"
    one = [jnp.zeros(1, jnp.int32), jnp.full(1, 3, jnp.int32), jnp.zeros(1, jnp.int32)]
    cache = jnp.zeros((CFG.n_layers, 1, 16, CFG.n_kv_heads, CFG.head_size))
    hlo = lambda: (
        jax.jit(lambda *a: E.decode(*a), static_argnums=6).lower(qm, *one, cache, cache, 16).as_text()
    )  # traced anew
    assert hlo().count(kernel_name) >= (7 if mode == "none" else 8)  # the loop body's seven matrices (and the head)
    prompt, params = [1, 5, 9, 13, 17], SamplingParams(max_tokens=8, temperature=0.0)
    with Engine(qm, max_batch=1) as eng:
        kernel = eng.generate([prompt], params)[0]
    ref = jax.nn.log_softmax(forward_jit(_dequantized(qm), jnp.asarray([prompt + kernel.tokens]))[0], -1)
    want = [float(ref[len(prompt) - 1 + i, t]) for i, t in enumerate(kernel.tokens)]
    np.testing.assert_allclose(kernel.logprobs, want, atol=1e-4)
    monkeypatch.setenv("MARIN_CPU_KERNELS", "off")
    assert kernel_name not in hlo()
    with Engine(qm, max_batch=1) as eng:
        xla = eng.generate([prompt], params)[0]
    assert xla.tokens == kernel.tokens
    # the kernel sums in register tiles, XLA in its own order: float32 rounding differs in the last digits
    np.testing.assert_allclose(xla.logprobs, kernel.logprobs, rtol=1e-5, atol=1e-5)
