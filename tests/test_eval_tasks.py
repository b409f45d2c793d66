"Multiple-choice scoring on the shared ARC-Easy / PIQA files agrees item by item with a straightforward independent implementation."

import dataclasses, json, math, os
import numpy as np
import pytest

os.environ.setdefault("WANDB_MODE", "offline")


@pytest.fixture(scope="module")
def model_and_tok():
    import jax
    from marin.data.tokenizers import train_bpe
    from marin.eval.tasks import BUILTIN_TASKS, load_items
    from marin.models.transformer import LlamaConfig, init

    texts = []
    for name in ("arc_easy", "piqa"):
        for it in load_items(dataclasses.replace(BUILTIN_TASKS[name], limit=300)):
            texts += [it["query"]] + it["choices"]
    tok = train_bpe(texts, 512)
    cfg = LlamaConfig(
        vocab_size=tok.vocab_size, seq_len=512, d_model=48, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=96, init_std=0.5
    )
    return init(cfg, key=jax.random.PRNGKey(3)), tok


_JIT = {}


def _forward(model, tokens):
    import equinox as eqx
    from marin.models.transformer import forward

    if "f" not in _JIT:
        _JIT["f"] = eqx.filter_jit(forward)
    return _JIT["f"](model, tokens)


def naive_loglik(model, tok, context: str, choice: str) -> float:
    "Independent: encode context and context+choice, run the unpadded sequence alone, sum log-softmax over the choice's tokens."
    import jax, jax.numpy as jnp
    from marin.models.transformer import forward

    whole = tok.encode(context + choice).tolist()
    # lm-eval's rule, written out: trailing spaces of the context belong to the continuation
    stripped = context.rstrip()
    n_ctx = len(tok.encode(stripped)) if stripped else 0
    if n_ctx == 0:
        whole, n_ctx = [tok.eos_id] + whole, 1
    S = model.cfg.seq_len
    assert len(whole) - 1 <= S
    padded = np.zeros(S, np.int32)
    padded[: len(whole) - 1] = whole[:-1]  # causal: trailing padding changes nothing before it
    logits = np.asarray(_forward(model, jnp.asarray(padded)[None])[0, : len(whole) - 1], np.float64)
    logp = (
        logits
        - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True))
        - logits.max(-1, keepdims=True)
    )
    return float(sum(logp[i - 1, whole[i]] for i in range(n_ctx, len(whole))))


@pytest.mark.parametrize("name,shots", [("arc_easy", 0), ("piqa", 1)])
def test_batched_scorer_agrees_with_naive_loop(model_and_tok, name, shots):
    from marin.eval.tasks import BUILTIN_TASKS, load_items, context_of, evaluate_multiple_choice
    from marin.eval.perplexity import model_logits_fn

    model, tok = model_and_tok
    task = dataclasses.replace(BUILTIN_TASKS[name], limit=16, num_fewshot=shots)
    items = load_items(task)
    res = evaluate_multiple_choice(model_logits_fn(model), tok, task, max_len=model.cfg.seq_len, batch_size=8)
    agree = 0
    for row, it in zip(res.items, items):
        ctx = context_of(task, items, row["index"])
        ll = [naive_loglik(model, tok, ctx, c) for c in it["choices"]]
        np.testing.assert_allclose(row["loglik"], ll, rtol=1e-4, atol=1e-3)
        agree += int(np.argmax(ll)) == row["pred"]
        norm = [l / len(c) for l, c in zip(ll, it["choices"])]
        agree += int(np.argmax(norm)) == row["pred_norm"]
    assert agree == 2 * len(items)
    # the model is not the oracle: accuracies are real numbers with standard errors
    assert 0 <= res.metrics[f"{name}/acc"] <= 1 and res.metrics[f"{name}/acc_stderr"] > 0


def test_shared_files_load_and_bad_files_name_the_line(tmp_path):
    from marin.eval.tasks import BUILTIN_TASKS, Task, TaskFileError, load_items

    assert len(load_items(BUILTIN_TASKS["arc_easy"])) == 2376 and len(load_items(BUILTIN_TASKS["piqa"])) == 1838
    lines = open(BUILTIN_TASKS["piqa"].resolved_path).read().splitlines()[:5]
    bad = json.loads(lines[3])
    bad["gold"] = 7
    p = tmp_path / "t.jsonl"
    p.write_text("\n".join(lines[:3] + [json.dumps(bad)]))
    with pytest.raises(TaskFileError, match=r"t.jsonl:4: gold=7 is out of range for 2 choices"):
        load_items(Task("t", str(p)))
    bad.pop("gold")
    bad["gold_index"] = 1
    p.write_text("\n".join(lines[:1] + [json.dumps(bad)]))
    with pytest.raises(TaskFileError, match=r"t.jsonl:2: missing field 'gold'"):
        load_items(Task("t", str(p)))
