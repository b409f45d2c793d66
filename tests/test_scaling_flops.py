"FLOP accounting: the model config's formula against XLA's cost analysis of the compiled program."

import pytest
from marin.models.transformer import LlamaConfig
from marin.scaling.flops import (
    training_flops_per_token,
    forward_flops_per_token,
    compiled_training_flops,
    effective_params,
    training_flops,
    attention_share,
)

SHAPES = [
    LlamaConfig(vocab_size=512, seq_len=64, d_model=64, n_layers=4, n_heads=2, n_kv_heads=2, d_ff=192),
    LlamaConfig(
        vocab_size=1024, seq_len=128, d_model=128, n_layers=3, n_heads=4, n_kv_heads=2, d_ff=352, tie_embeddings=True
    ),
    LlamaConfig(vocab_size=256, seq_len=256, d_model=96, n_layers=2, n_heads=3, n_kv_heads=1, d_ff=256, qk_norm=True),
]


@pytest.mark.parametrize("cfg", SHAPES, ids=lambda c: f"d{c.d_model}L{c.n_layers}S{c.seq_len}")
def test_training_flops_match_cost_analysis(cfg):
    xla = compiled_training_flops(cfg, batch_size=2)
    assert abs(xla / training_flops_per_token(cfg) - 1) < 0.05, (xla, training_flops_per_token(cfg))


def test_forward_flops_match_cost_analysis():
    cfg = SHAPES[1]
    xla = compiled_training_flops(cfg, batch_size=2, forward_only=True)
    assert abs(xla / forward_flops_per_token(cfg) - 1) < 0.05


def test_attention_term():
    c = SHAPES[0].replace(n_layers=1)  # one compiled program per context
    assert training_flops_per_token(c, 128) - training_flops_per_token(c, 64) == 12 * c.n_layers * 64 * c.q_dim
    grow = compiled_training_flops(c.replace(seq_len=128)) - compiled_training_flops(c)
    assert abs(grow / (12 * c.n_layers * 64 * c.q_dim) - 1) < 0.1


def test_derived_quantities():
    c = SHAPES[0]
    assert training_flops(c, 10) == pytest.approx(60 * effective_params(c))
    assert training_flops_per_token(c) == pytest.approx(3 * forward_flops_per_token(c))
    big = LlamaConfig(vocab_size=128256, seq_len=8192, d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8, d_ff=14336)
    assert 0.1 < attention_share(big) < 0.3  # Llama-3-8B at 8k context: about a fifth of the FLOPs are attention


def test_moe_active_flops_match_cost_analysis():
    from marin.models.moe import MoEConfig

    moe = MoEConfig(
        n_experts=8, top_k=2, balance="none", log_expert_load=False, dispatch="capacity", capacity_factor=1.0
    )
    cfg = LlamaConfig(vocab_size=256, seq_len=64, d_model=64, n_layers=1, n_heads=2, n_kv_heads=2, d_ff=64, moe=moe)
    assert training_flops_per_token(cfg) < 6 * cfg.n_params  # active < total parameters
    xla = compiled_training_flops(cfg, batch_size=2)
    assert abs(xla / training_flops_per_token(cfg) - 1) < 0.05
