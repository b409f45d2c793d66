"Recipes: every budget from this machine to a cluster gives a valid, exactly-costed configuration; forks work."

import dataclasses, math
import pytest
from marin.core.config import ConfigError
from marin.models.transformer import LlamaConfig
from marin.scaling.recipe import ComputeOptimalRecipe, TinyCpuRecipe, ScalingPlan
from marin.scaling.flops import training_flops

BUDGETS = [10.0**e for e in range(12, 24)] + [3 * 10.0**e for e in range(12, 23)]


@pytest.mark.parametrize("vocab", [4096, 32000, 128256])
def test_every_budget_is_a_valid_config_within_5_percent(vocab):
    r = ComputeOptimalRecipe()
    for C in BUDGETS:
        if vocab == 128256 and C < 1e15:
            continue  # a 128k vocabulary alone costs more than these budgets allow
        p = r.plan(C, vocab_size=vocab)
        m = p.model
        assert (
            isinstance(m, LlamaConfig)
            and LlamaConfig(**{f.name: getattr(m, f.name) for f in dataclasses.fields(m)}) == m
        )  # re-validates
        assert m.n_heads * m.head_size == m.d_model and m.n_heads % m.n_kv_heads == 0
        flops = training_flops(m, p.tokens, p.seq_len)  # the model's own count x tokens
        assert flops == pytest.approx(p.flops) and abs(flops / C - 1) < 0.05, (C, flops / C)
        assert p.num_steps >= r.min_steps and p.batch_size >= 1 and p.seq_len <= m.seq_len
        o = p.optimizer
        assert 0 < o.learning_rate <= r.max_learning_rate and 0.95 <= o.beta2 <= 0.99 and 1e-15 <= o.eps <= 1e-8
        assert 0 <= o.warmup <= 0.25 * p.num_steps
        if C >= 1e17:
            assert 10 < p.tokens_per_param < 40, (C, p.tokens_per_param)  # Chinchilla's ~20, up to the width grid


def test_tiny_recipe_budgets_on_this_machine():
    r = TinyCpuRecipe()
    for C in (1e10, 3e10, 1e11, 1e12, 1e13):
        p = r.plan(C, vocab_size=512)
        assert abs(p.flops_error) < 0.05 and p.seq_len == 128 and 5 < p.tokens_per_param < 80


def test_formulas_follow_the_published_rules():
    r = ComputeOptimalRecipe()
    assert r.target_params(6 * 20 * 1e18) == pytest.approx(1e9)  # C = 6 N D, D = 20 N
    assert r.learning_rate(1e20) == pytest.approx(0.3118 * 1e20**-0.125)
    assert r.batch_tokens(1e20) == pytest.approx(0.292 * 1e20**0.3271)
    assert r.n_layers_for(4096) == 32 and r.heads_for(4096) == (32, 8, 128) and r.d_ff_for(4096) == 10944
    assert r.beta2_for(4 * 2**20) == pytest.approx(0.95) and r.beta2_for(1e4) == 0.99
    assert r.seq_len_for(4096) == 4096 and r.seq_len_for(64) == 128


def test_fork_overrides_a_formula_and_stays_frozen():
    @dataclasses.dataclass(frozen=True)
    class LongerTraining(ComputeOptimalRecipe):
        name: str = "longer"
        tokens_per_param: float = 80.0

        def learning_rate(self, budget):
            return 0.5 * super().learning_rate(budget)

    base, fork = ComputeOptimalRecipe().plan(1e19, vocab_size=32000), LongerTraining().plan(1e19, vocab_size=32000)
    assert fork.tokens_per_param > 2.5 * base.tokens_per_param and abs(fork.flops_error) < 0.05
    assert fork.optimizer.learning_rate == pytest.approx(0.5 * base.optimizer.learning_rate) and fork.recipe == "longer"
    with pytest.raises(dataclasses.FrozenInstanceError):
        LongerTraining().tokens_per_param = 1.0


def test_errors_name_the_field():
    with pytest.raises(ConfigError, match="tokens_per_param"):
        ComputeOptimalRecipe(tokens_per_param=-1)
    with pytest.raises(ConfigError, match="min_seq_len"):
        ComputeOptimalRecipe(min_seq_len=4096, max_seq_len=128)
    with pytest.raises(ValueError, match="budget"):
        ComputeOptimalRecipe().plan(float("nan"), vocab_size=512)
    with pytest.raises(ValueError, match="raise the budget"):
        ComputeOptimalRecipe().plan(1e8, vocab_size=32000)


def test_plan_to_train_config():
    p = TinyCpuRecipe().plan(1e11, vocab_size=512)
    cfg = p.train_config()
    assert cfg.num_train_steps == p.num_steps and cfg.tokens_per_step == p.tokens_per_step and cfg.model == p.model
    from marin.train.trainer import SyntheticDataConfig

    with pytest.raises(ValueError, match="batch_size"):
        p.train_config(SyntheticDataConfig(vocab_size=512, batch_size=p.batch_size + 1, seq_len=128))


def test_moe_recipe_budgets():
    from marin.scaling.recipe import MoERecipe

    r, d = MoERecipe(), ComputeOptimalRecipe()
    for C in (1e16, 1e18, 1e20, 1e22):
        p = r.plan(C, vocab_size=32000)
        assert p.model.moe is not None and p.model.moe.top_k == r.granularity
        assert abs(training_flops(p.model, p.tokens, p.seq_len) / C - 1) < 0.05
        assert (
            p.model.n_params > (3 if C >= 1e18 else 1) * d.plan(C, vocab_size=32000).model.n_params
        )  # total >> active
    with pytest.raises(ConfigError, match="granularity"):
        MoERecipe(granularity=64)
