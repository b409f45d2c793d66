"""The dense transformer: gradients vs finite differences, segment masking in both attention implementations,
parameter counts, RoPE scalings, mixed precision."""

import math
import dataclasses
import equinox as eqx
import jax, jax.numpy as jnp, numpy as np
import pytest
from marin.models.transformer import (
    LlamaConfig,
    init,
    forward,
    next_token_loss,
    directional_grad_check,
    count_params,
    rope_frequencies,
    generate,
    ATTENTION_IMPLS,
)

TINY = LlamaConfig(vocab_size=23, seq_len=12, d_model=24, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=40)


@pytest.mark.parametrize(
    "cfg",
    [
        TINY,
        TINY.replace(
            tie_embeddings=True,
            qk_norm=True,
            n_kv_heads=1,
            rope_scaling="llama3",
            rope_factor=8.0,
            rope_original_seq_len=4,
        ),
    ],
    ids=["untied-gqa", "tied-qknorm-mqa-llama3rope"],
)
def test_gradients_match_finite_differences(cfg):
    ad, fd = directional_grad_check(cfg, remat="block")
    assert abs(ad - fd) <= 1e-6 * max(1.0, abs(ad)), (ad, fd)


def test_gradient_check_detects_a_wrong_gradient():
    "The check has teeth: stopping the gradient through the MLP changes autodiff but not the finite difference."
    import marin.models.transformer as T

    orig = jax.nn.silu
    try:
        T.jax.nn.silu = lambda x: jax.lax.stop_gradient(orig(x)) + 0 * x
        ad, fd = directional_grad_check(TINY, remat="none")
    finally:
        T.jax.nn.silu = orig
    assert abs(ad - fd) > 1e-4 * max(1.0, abs(ad))


@pytest.mark.parametrize(
    "impl",
    [
        pytest.param(
            i,
            marks=pytest.mark.skipif(
                {"cudnn": "gpu", "splash": "tpu"}.get(i, jax.default_backend()) != jax.default_backend(),
                reason="cuDNN needs an NVIDIA GPU; splash a TPU (tests/test_tpu_attention.py: interpret mode, compiled)",
            ),
        )
        for i in ATTENTION_IMPLS
    ],
)
def test_segments_block_attention_across_documents(impl):
    cfg = TINY.replace(attention=impl)
    m = init(cfg, key=jax.random.PRNGKey(0))
    toks = jax.random.randint(jax.random.PRNGKey(1), (3, 12), 0, 23)
    seg = jnp.array([[1] * 5 + [2] * 4 + [3] * 3, [1] * 6 + [0] * 6, [1] * 12])  # packed docs; padding; one doc
    changed = toks.at[0, 5:9].set((toks[0, 5:9] + 7) % 23).at[1, 6:].set(0)
    a, b = forward(m, toks, seg), forward(m, changed, seg)
    assert jnp.allclose(a[0, :5], b[0, :5], atol=1e-6) and jnp.allclose(
        a[0, 9:], b[0, 9:], atol=1e-6
    )  # docs 1 and 3 untouched
    assert not jnp.allclose(a[0, 5:9], b[0, 5:9])
    assert jnp.allclose(a[1, :6], b[1, :6], atol=1e-6)  # padding invisible
    assert jnp.isfinite(a).all()
    # a document alone gives the same logits as the document inside a pack
    alone = forward(m, toks[:1, 5:9], None)
    assert jnp.allclose(alone[0], a[0, 5:9], atol=1e-5)


def test_attention_impls_agree():
    m = init(TINY.replace(qk_norm=True), key=jax.random.PRNGKey(2))
    toks = jax.random.randint(jax.random.PRNGKey(3), (2, 12), 0, 23)
    seg = jnp.array([[1] * 7 + [2] * 5, [1] * 12])
    ref = forward(dataclasses.replace(m, cfg=m.cfg.replace(attention="reference")), toks, seg)
    xla = forward(dataclasses.replace(m, cfg=m.cfg.replace(attention="xla")), toks, seg)
    assert jnp.allclose(ref, xla, atol=1e-5)


def test_param_counts_and_flops():
    for cfg in (TINY, TINY.replace(tie_embeddings=True, qk_norm=True), TINY.replace(head_dim=8)):
        assert count_params(init(cfg, key=jax.random.PRNGKey(0))) == cfg.n_params
    c = LlamaConfig(vocab_size=32000, seq_len=2048, d_model=4096, n_layers=32, n_heads=32, n_kv_heads=32, d_ff=11008)
    assert abs(c.n_params - 6.74e9) / 6.74e9 < 0.01  # Llama 2 7B
    assert c.flops_per_token() == 6 * c.n_matmul_params + 12 * 32 * 2048 * 4096


def test_config_errors_name_the_field():
    for kw, field in [
        ({"d_model": 30, "n_heads": 4}, "n_heads"),
        ({"n_heads": 8, "n_kv_heads": 3}, "n_kv_heads"),
        ({"rope_scaling": "yarn2"}, "rope_scaling"),
        ({"attention": "flash"}, "attention"),
        ({"vocab_size": 0}, "vocab_size"),
    ]:
        with pytest.raises(ValueError, match=field):
            LlamaConfig(**kw)


def test_rope_scalings():
    base = rope_frequencies(TINY)
    lin = rope_frequencies(TINY.replace(rope_scaling="linear", rope_factor=4.0))
    assert jnp.allclose(lin, base / 4)
    ntk = rope_frequencies(TINY.replace(rope_scaling="ntk", rope_factor=4.0))
    assert ntk[0] == base[0] and (ntk[1:] < base[1:]).all()  # highest frequency kept, the rest stretched
    l3 = rope_frequencies(TINY.replace(rope_scaling="llama3", rope_factor=8.0, rope_original_seq_len=64))
    wl = 2 * math.pi / base
    assert jnp.allclose(l3[wl < 16], base[wl < 16]) and jnp.allclose(l3[wl > 64], base[wl > 64] / 8)


def test_bfloat16_compute_is_close_to_float32():
    m = init(TINY, key=jax.random.PRNGKey(0))
    toks = jax.random.randint(jax.random.PRNGKey(1), (2, 12), 0, 23)
    b = {"tokens": toks, "segment_ids": jnp.ones_like(toks), "loss_mask": jnp.ones(toks.shape)}
    l32, _ = next_token_loss(m, b)
    l16, _ = next_token_loss(m, b, compute_dtype=jnp.bfloat16)
    assert l16.dtype == jnp.float32 and abs(float(l32) - float(l16)) < 0.02
    g = eqx.filter_jit(jax.grad(lambda mm: next_token_loss(mm, b, compute_dtype=jnp.bfloat16, remat="dots")[0]))(m)
    assert g.blocks.wq.dtype == jnp.float32  # gradients land on the float32 master weights


def test_loss_mask_and_z_loss():
    m = init(TINY, key=jax.random.PRNGKey(0))
    toks = jax.random.randint(jax.random.PRNGKey(1), (1, 12), 0, 23)
    full = {"tokens": toks, "loss_mask": jnp.ones((1, 12))}
    half = {"tokens": toks, "loss_mask": jnp.ones((1, 12)).at[:, 6:].set(0)}
    logits = forward(m, toks)
    nll = jax.nn.logsumexp(logits, -1) - jnp.take_along_axis(logits, jnp.roll(toks, -1, 1)[..., None], -1)[..., 0]
    assert jnp.allclose(next_token_loss(m, full)[0], nll[0, :11].mean(), atol=1e-6)
    assert jnp.allclose(next_token_loss(m, half)[0], nll[0, :6].mean(), atol=1e-6)
    lz, aux = next_token_loss(m, full, z_loss_weight=0.5)
    assert jnp.allclose(lz, aux["ce"] + 0.5 * aux["z_loss"]) and aux["z_loss"] > 0


def test_generate_is_deterministic_and_greedy_matches_argmax():
    m = init(TINY, key=jax.random.PRNGKey(0))
    a = generate(m, [1, 2, 3], 4, key=jax.random.PRNGKey(5), temperature=0.0)
    logits = forward(m, jnp.array([[1, 2, 3]]))
    assert a[0] == int(jnp.argmax(logits[0, -1]))
    assert generate(m, [1, 2, 3], 4, key=jax.random.PRNGKey(5), temperature=1.0) == generate(
        m, [1, 2, 3], 4, key=jax.random.PRNGKey(5), temperature=1.0
    )
