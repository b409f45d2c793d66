"`marin eval` end to end: a tiny BPE-tokenized run, tasks + a held-out perplexity source on every checkpoint, ledger records, caching."

import json, math, os
import numpy as np
import pytest

os.environ.setdefault("WANDB_MODE", "offline")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from marin.data.sources import write_documents
    from marin.data.tokenizers import train_bpe
    from marin.data.shards import TokenizeConfig, tokenize_documents
    from marin.data.mixture import MixtureComponent, MixtureConfig
    from marin.models.transformer import LlamaConfig
    from marin.train.trainer import TrainConfig, train
    from marin.train.checkpoint import CheckpointConfig
    from marin.train.optim import OptimizerConfig

    tmp = tmp_path_factory.mktemp("evalcli")
    texts = [f"Question: what is {i} plus {i}?\nAnswer: {2 * i}. The cat sat on the mat." for i in range(60)]
    tok = train_bpe(texts, 320)
    tok.save(str(tmp / "tok"))
    for name, part in (("train", texts[:50]), ("held", texts[50:])):
        write_documents(
            [{"id": f"{name}{i}", "text": t, "source": name, "meta": {}} for i, t in enumerate(part)],
            str(tmp / f"docs_{name}"),
        )
        tokenize_documents(TokenizeConfig(str(tmp / f"docs_{name}"), str(tmp / "tok")), str(tmp / f"tokens_{name}"))
    cfg = LlamaConfig(vocab_size=tok.vocab_size, seq_len=128, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64)
    tc = TrainConfig(
        model=cfg,
        data=MixtureConfig((MixtureComponent("train", str(tmp / "tokens_train")),), seq_len=64, batch_size=4),
        num_train_steps=4,
        optimizer=OptimizerConfig(learning_rate=3e-3),
        checkpoint=CheckpointConfig(every=2, keep_last=5, async_write=False),
        progress=False,
        tracker="disabled",
    )
    train(tc, str(tmp / "run"))
    return tmp, tok


def test_perplexity_is_the_hand_computed_loss_and_bpb(run):
    "bpb = loss x tokens / (bytes x ln 2), with loss from an independent per-document computation."
    import jax, jax.numpy as jnp
    from marin.eval.perplexity import PerplexitySuite, HeldOutSource, evaluate_perplexity
    from marin.data.shards import TokenSet
    from marin.models.transformer import forward
    from marin.models.io import load_model

    tmp, tok = run
    model, _ = load_model(str(tmp / "run"))
    m = evaluate_perplexity(
        model,
        PerplexitySuite((HeldOutSource("held", str(tmp / "tokens_held")),), max_tokens_per_source=10**6, seq_len=32),
    )
    ts = TokenSet(str(tmp / "tokens_held"))
    import equinox as eqx

    fwd = eqx.filter_jit(forward)
    nll, n = 0.0, 0
    for i in range(len(ts)):
        x = np.concatenate([[tok.eos_id], ts.doc_tokens(i)])
        # windows of 32 overlapping by one token, each scored alone
        for s in range(0, len(x) - 1, 31):
            w = x[s : s + 32]
            padded = np.zeros(32, np.int32)
            padded[: len(w)] = w  # causal: trailing padding changes nothing before it
            lp = np.asarray(jax.nn.log_softmax(fwd(model, jnp.asarray(padded)[None])[0], -1))
            nll -= float(sum(lp[j, w[j + 1]] for j in range(len(w) - 1)))
            n += len(w) - 1
    n_bytes = sum(
        len(t.encode())
        for t in [f"Question: what is {i} plus {i}?\nAnswer: {2 * i}. The cat sat on the mat." for i in range(50, 60)]
    )
    assert n == ts.n_tokens == m["eval/held/tokens"] and m["eval/held/bytes"] == n_bytes
    assert abs(m["eval/held/loss"] - nll / n) < 1e-4
    assert abs(m["eval/held/bpb"] - nll / (n_bytes * math.log(2))) < 1e-4


def test_marin_eval_cli_all_checkpoints_ledger_and_cache(run, monkeypatch, tmp_path):
    from typer.testing import CliRunner
    from marin.eval.cli import app
    from marin.eval.results import eval_results
    from marin.core.ledger import Ledger

    tmp, tok = run
    monkeypatch.setenv("MARIN_PREFIX", str(tmp_path / "store"))
    args = [
        "eval",
        "--checkpoint",
        str(tmp / "run"),
        "--suite",
        "piqa",
        "--suite",
        "arc_easy_gen",
        "--suite",
        f"held={tmp / 'tokens_held'}",
        "--tokenizer",
        str(tmp / "tok"),
        "--limit",
        "4",
        "--all-steps",
        "--seq-len",
        "64",
        "--json",
    ]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, (r.output, r.exception)
    out = json.loads(r.output[r.output.index("{") :])
    got = {(x["step"], x["metric"]) for x in out["results"]}
    for s in (2, 4):
        assert {
            (s, "eval/piqa/acc"),
            (s, "eval/piqa/acc_norm"),
            (s, "eval/arc_easy_gen/exact_match"),
            (s, "eval/held/bpb"),
            (s, "eval/overall/bpb"),
        } <= got
    recs = Ledger().sql("select step, config from records where kind = 'eval'")
    per = sorted((json.loads(c)["checkpoint_step"], st) for st, c in zip(recs.step, recs.config))
    assert per == sorted(
        [(s, t) for s in (2, 4) for t in ("eval/piqa", "eval/arc_easy_gen", "eval/perplexity")]
    )  # one record per task per checkpoint
    df = eval_results()
    assert set(df[df.metric == "eval/piqa/acc"].step) == {2, 4}
    r2 = CliRunner().invoke(app, args)  # cached: no new records
    assert r2.exit_code == 0 and len(Ledger().sql("select * from records where kind = 'eval'")) == 6
    bad = CliRunner().invoke(app, ["eval", "--checkpoint", str(tmp / "run"), "--suite", "piqa", "--step", "3"])
    assert bad.exit_code != 0 and "[3]" in str(bad.exception)
