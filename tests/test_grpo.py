"""GRPO end to end on a tiny model read back from a checkpoint, with its own tokenizer: rollouts from the lab's serving
engine (the trainer's log-probabilities equal the sampler's), built-in and user (`module:function`) rewards on the
decoded text, and a few full and LoRA steps that change the policy with a finite loss."""

import numpy as np
import pytest


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    "A base model (untrained, written as a checkpoint and loaded back), its tokenizer, arithmetic prompts, an engine."
    import jax
    from marin.core.config import canonical
    from marin.data.tokenizers import train_bpe
    from marin.models.io import load_model
    from marin.models.pretrained import write_model_checkpoint
    from marin.models.transformer import LlamaConfig, init
    from marin.serve.engine import Engine

    questions = [(f"What is {a} plus {b}?", str(a + b)) for a, b in [(3, 4), (10, 5), (7, 8), (2, 9), (6, 6), (1, 12)]]
    tok = train_bpe([f"{q} The answer is #### {a}." for q, a in questions] * 4, 300)
    cfg = LlamaConfig(vocab_size=tok.vocab_size, seq_len=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64)
    base_dir = tmp_path_factory.mktemp("grpo") / "base"
    meta = {"model_config": canonical(cfg), "model_config_versioned": canonical(cfg, versioned_only=True)}
    write_model_checkpoint(str(base_dir), init(cfg, key=jax.random.PRNGKey(0)), meta)
    base, _ = load_model(str(base_dir))
    prompts = [[int(t) for t in tok.encode(q)] for q, _ in questions]
    engine = Engine(base, max_batch=8, max_seq_len=64, eos_ids=[tok.eos_id], decode_text=tok.decode)
    yield base, tok, prompts, [a for _, a in questions], engine
    engine.close()


def test_rollout_logprobs_are_the_trainers_for_the_same_weights(lab):
    import jax.numpy as jnp
    from marin.posttrain.grpo import rollout, rollout_rows, token_logps
    from marin.serve.engine import SamplingParams

    base, tok, prompts, _, engine = lab
    ro = rollout(engine, base, prompts[:3], 4, SamplingParams(max_tokens=12, temperature=1.0), seed=5)
    assert len(ro.completions) == 12 and all(1 <= len(c) <= 12 for c in ro.completions)
    rows = rollout_rows(ro, 64, tok.pad_id)
    lp = np.asarray(token_logps(base, jnp.asarray(rows["tokens"]), jnp.asarray(rows["segment_ids"])))
    m = rows["completion_mask"] > 0
    assert m.sum() == sum(len(c) for c in ro.completions)
    assert np.abs(lp - rows["logp_old"])[m].max() < 1e-4  # float32, two attention implementations


def test_user_reward_by_module_function(lab, tmp_path, monkeypatch):
    from marin.posttrain.grpo import load_reward, score_completions

    (tmp_path / "grpo_test_rewards.py").write_text(
        "def short(completion, answer):\n    return 1.0 / (1 + len(completion))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    fns = [load_reward("exact_match"), load_reward("format"), load_reward("grpo_test_rewards:short")]
    s = score_completions(fns, ["#### 7", "eight"], ["7", "7"])
    assert s.tolist() == [[1.0, 1.0, 1 / 7], [0.0, 0.0, 1 / 6]]
    with pytest.raises(ValueError, match="'grpo_test_rewards:long'.*no attribute 'long'"):
        load_reward("grpo_test_rewards:long")


@pytest.mark.parametrize("lora", [False, True])
def test_grpo_steps_change_the_policy(lab, lora):
    import jax, equinox as eqx
    from marin.models.lora import LoraConfig
    from marin.posttrain.grpo import GRPOConfig, grpo_train
    from marin.serve.engine import SamplingParams
    from marin.train.optim import OptimizerConfig

    base, tok, prompts, answers, engine = lab
    cfg = GRPOConfig(
        group_size=4,
        prompts_per_step=2,
        num_steps=3,
        kl_coef=0.04,
        lora=LoraConfig(rank=4) if lora else None,
        optimizer=OptimizerConfig(learning_rate=1e-2, schedule="constant", warmup=0.0, weight_decay=0.0),
    )

    def length(completion, answer):  # a reward that varies within every group: the update is never zero
        return len(completion) / 40

    rows = []
    policy, params, hist = grpo_train(
        base, prompts, answers, ["exact_match", "format", length], engine, SamplingParams(max_tokens=10),
        tok.decode, cfg, log=rows.append,
    )  # fmt: skip
    assert rows == hist and [h["step"] for h in hist] == [0, 1, 2]
    assert all(np.isfinite(h["loss"]) and np.isfinite(h["kl"]) and h["grad_norm"] > 0 for h in hist)
    assert {"reward/exact_match", "reward/format", "reward/length", "completion_length", "rollout_s"} <= set(hist[0])
    assert hist[0]["kl"] == 0.0 and hist[-1]["kl"] > 0  # the policy starts as the reference, then leaves it
    before, after = eqx.filter(base, eqx.is_array), eqx.filter(policy, eqx.is_array)
    moved = max(float(abs(a - b).max()) for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(after)))
    assert moved > 1e-4
    if lora:  # the trained params are the adapter; only the targeted projections moved
        assert float(abs(params.q_proj.b).max()) > 0
        assert (
            float(abs(policy.blocks.wk - base.blocks.wk).max())
            == 0
            < float(abs(policy.blocks.wq - base.blocks.wq).max())
        )
