"""`marin sft` and `marin dpo` end to end through their typer app: a tiny base model with its own tokenizer and chat
template, real SFT and DPO steps in the ledger with their curves, `--dry-run`'s report, and every kind of bad input
refused with its file and line (exit code 2) before anything compiles."""

import json, os
import pytest

os.environ.setdefault("WANDB_MODE", "offline")


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    "A base model (untrained, written as a checkpoint: no compile) with tokenizer and template; chat and pair files."
    import jax
    from marin.core.config import canonical
    from marin.core.settings import shared_data_dir
    from marin.data.tokenizers import train_bpe
    from marin.models.pretrained import write_model_checkpoint
    from marin.models.transformer import LlamaConfig, init
    from marin.posttrain.sft import ChatTemplate, load_conversations, save_chat_template

    tmp = tmp_path_factory.mktemp("postcli")
    convs = load_conversations(str(shared_data_dir() / "chat" / "dolly_1k_messages.jsonl"), limit=40)
    tok = train_bpe([ChatTemplate().render(c) for c in convs], 384)
    cfg = LlamaConfig(vocab_size=tok.vocab_size, seq_len=128, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64)
    base = tmp / "base"
    write_model_checkpoint(
        str(base),
        init(cfg, key=jax.random.PRNGKey(0)),
        {"model_config": canonical(cfg), "model_config_versioned": canonical(cfg, versioned_only=True)},
    )
    save_chat_template(str(base), ChatTemplate(), tok)  # the base carries its tokenizer and template
    chats = tmp / "chats.jsonl"
    chats.write_text("".join(json.dumps({"messages": c}) + "\n" for c in convs[:24]))
    pairs = tmp / "pairs.jsonl"
    pairs.write_text(
        json.dumps({"prompt": "Name a colour.", "chosen": "Blue.", "rejected": "Seven."})
        + "\n"
        + "".join(
            json.dumps({"prompt": c[0]["content"], "chosen": c[-1]["content"], "rejected": convs[i + 1][-1]["content"]})
            + "\n"
            for i, c in enumerate(convs[:12])
        )
    )
    return tmp, base, chats, pairs, convs


def invoke(*args):
    from typer.testing import CliRunner
    from marin.posttrain.cli import app

    return CliRunner().invoke(app, [str(a) for a in args], terminal_width=200)


def test_sft_runs_as_a_ledger_step_with_its_curve_then_is_cached(lab, monkeypatch, tmp_path):
    from marin.core.ledger import Ledger

    tmp, base, chats, _, _ = lab
    monkeypatch.setenv("MARIN_PREFIX", str(tmp_path / "store"))
    args = ("sft", "--base", base, "--data", chats, "--steps", 3, "--batch-size", 2, "--seq-len", 96, "--log-every", 1)
    r = invoke(*args, "--learning-rate", 3e-3, "--warmup", 1)
    assert r.exit_code == 0, (r.output, r.exception)
    out = r.output.split("output: ")[1].split("\n")[0]
    assert (
        f"marin eval --checkpoint {out}" in r.output
        and f"marin export --checkpoint {out} --output {out}-hf" in r.output
    )
    rec = Ledger().sql("select step, status, output_path, metrics from runs where kind = 'step' and step like 'sft/%'")
    assert list(zip(rec.step, rec.status, rec.output_path)) == [("sft/base", "SUCCESS", out)]
    assert json.loads(rec.metrics[0])["data/sft_conversations"] == 24  # the step's summary, in the ledger
    hist = [json.loads(x) for x in open(os.path.join(out, "history.jsonl"))]  # its curve, in the recorded output
    assert [h["step"] for h in hist] == [0, 1, 2] and all(h["loss"] > 0 for h in hist)
    assert os.path.exists(os.path.join(out, "chat_template.json"))  # the template travels with the output
    r2 = invoke(*args, "--learning-rate", 3e-3, "--warmup", 1)
    assert (
        r2.exit_code == 0 and f"{os.path.basename(os.path.dirname(out))}/{os.path.basename(out)}: cached" in r2.output
    )
    assert len(Ledger().sql("select * from runs where kind = 'step' and step like 'sft/%'")) == 1  # no second run


def test_dpo_lora_runs_as_a_ledger_step(lab, monkeypatch, tmp_path):
    from marin.core.ledger import Ledger
    from marin.models.io import load_model

    tmp, base, _, pairs, _ = lab
    monkeypatch.setenv("MARIN_PREFIX", str(tmp_path / "store"))
    r = invoke("dpo", "--base", base, "--data", pairs, "--lora", 2, "--steps", 2, "--batch-size", 2, "--seq-len", 64,
               "--log-every", 1, "--name", "dpo/tiny")  # fmt: skip
    assert r.exit_code == 0, (r.output, r.exception)
    out = r.output.split("output: ")[1].split("\n")[0]
    rec = Ledger().sql("select status, output_path from runs where kind = 'step' and step = 'dpo/tiny'")
    assert list(zip(rec.status, rec.output_path)) == [("SUCCESS", out)]
    hist = [json.loads(x) for x in open(os.path.join(out, "history.jsonl"))]
    assert len(hist) == 2 and abs(hist[0]["loss"] - 0.6931) < 1e-3  # policy == reference at the first step
    _, meta = load_model(out)
    assert meta["posttrain"] == "dpo" and meta["lora"]["rank"] == 2


def test_dry_run_shows_the_first_example_and_the_loss_tokens(lab, monkeypatch, tmp_path):
    tmp, base, chats, pairs, convs = lab
    monkeypatch.setenv("MARIN_PREFIX", str(tmp_path / "store"))
    r = invoke("sft", "--base", base, "--data", chats, "--steps", 50, "--batch-size", 4, "--seq-len", 128, "--dry-run")
    assert r.exit_code == 0, (r.output, r.exception)
    text = r.output
    assert f"first example ({chats}:1)" in text and "the loss sees the tokens inside [[ ]]" in text
    first = text.split("inside [[ ]]:\n")[1]
    user, reply = convs[0][0]["content"], convs[0][1]["content"]
    assert first.startswith("User: " + user[:20]), first[:80]
    loss_part = first.split("[[", 1)[1].split("]]", 1)[0]
    assert reply[:20] in loss_part and user[:20] not in loss_part  # the reply is in the loss, the prompt is not
    assert "24 conversations" in text and "50 steps x 4 rows x 128 tokens = 512 tokens per step, 25,600 in all" in text
    assert "estimated memory per device" in text and "template: the lab's prefix template" in text
    out = text.split("output: ")[1].split("\n")[0]
    assert not os.path.exists(out)  # nothing ran
    r = invoke("dpo", "--base", base, "--data", pairs, "--steps", 10, "--dry-run", "--lora", 4)
    assert r.exit_code == 0, (r.output, r.exception)
    assert f"first pair ({pairs}:1)" in r.output and "LoRA rank 4" in r.output
    chosen, rejected = r.output.split("chosen:   ")[1].split("\nrejected: ")
    assert chosen == "User: Name a colour.\n\nAssistant: [[Blue.<|endoftext|>]]", chosen
    assert rejected.startswith("User: Name a colour.\n\nAssistant: [[Seven.<|endoftext|>]]\n"), rejected
    r = invoke("dpo", "--base", base, "--data", chats, "--seq-len", 24, "--dry-run")  # shows the rows as cut
    chosen = r.output.split("chosen:   ")[1].split("rejected: ")[0]
    assert r.exit_code == 0 and "<|endoftext|>" not in chosen and "[[Kangen water" in chosen, chosen
    assert "kangen water?" not in chosen  # a long response keeps its start; the prompt is cut from the front
    # chat data given to dpo: pairs made from the conversations
    r = invoke("dpo", "--base", base, "--data", chats, "--dry-run")
    assert r.exit_code == 0 and "24 pairs made from chat conversations" in r.output, r.output


STRICT = (
    "{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('system messages are not supported') }}"
    "{% endif %}{{ m['role'] + ': ' + m['content'] + '\\n' }}{% endfor %}"
)
GOOD = {"messages": [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "Blue."}]}


def _bad_cases(tmp):
    "(name, command, file contents, extra args, what the error must say) for each kind of bad input."
    no_reply = {"messages": [{"role": "user", "content": "hello?"}]}
    system = {"messages": [{"role": "system", "content": "Be brief."}] + GOOD["messages"]}
    pair = {"prompt": "2+2?", "chosen": "4", "rejected": "5"}
    return [
        ("no_assistant", "sft", [GOOD, GOOD, no_reply], [], "{f}:3: no assistant message"),
        ("bad_json", "sft", [GOOD, '{"messages": [', GOOD], [], "{f}:2: not valid JSON"),
        ("no_messages", "sft", [GOOD, {"text": "hi"}], [], "{f}:2: missing field 'messages'"),
        ("bad_role", "sft", [{"messages": [{"role": "bot", "content": "x"}]}], [], "{f}:1: each message needs role"),
        (
            "template_refuses",
            "sft",
            [GOOD, system],
            ["--template", tmp / "strict.jinja"],
            "{f}:2: the chat template cannot render this record",
        ),  # fmt: skip
        (
            "template_syntax",
            "sft",
            [GOOD],
            ["--template", tmp / "broken.jinja"],
            "broken.jinja: the chat template is not valid Jinja (line 1",
        ),
        ("same_answers", "dpo", [pair, dict(pair, rejected="4")], [], "{f}:2: chosen and rejected are the same answer"),
        ("no_rejected", "dpo", [pair, {"prompt": "a", "chosen": "b"}], [], "{f}:2: missing field 'rejected'"),
        (
            "dpo_template_refuses",
            "dpo",
            [dict(pair, prompt=system["messages"][:2])],
            ["--template", tmp / "strict.jinja"],
            "{f}:1: the chat template cannot render this record",
        ),  # fmt: skip
    ]


def test_bad_input_exits_2_naming_file_and_line_before_any_compile(lab, monkeypatch, tmp_path):
    tmp, base, _, _, _ = lab
    monkeypatch.setenv("MARIN_PREFIX", str(tmp_path / "store"))
    (tmp_path / "strict.jinja").write_text(STRICT)
    (tmp_path / "broken.jinja").write_text("{% for m in messages %}{{ m['content'] }")
    for name, cmd, records, extra, says in _bad_cases(tmp_path):
        f = tmp_path / f"{name}.jsonl"
        f.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in records))
        r = invoke(cmd, "--base", base, "--data", f, "--steps", 2, *extra)
        assert r.exit_code == 2, (name, r.output, r.exception)
        err = [x for x in r.output.splitlines() if x.startswith("error: ")]
        assert len(err) == 1 and says.format(f=f) in err[0], (name, r.output)
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").rglob("checkpoints"))  # nothing ran
    r = invoke("sft", "--base", base, "--data", tmp_path / "missing.jsonl")
    assert r.exit_code == 2 and "missing.jsonl: no such file" in r.output
    r = invoke("sft", "--base", tmp_path / "nobase", "--data", "dolly")
    assert r.exit_code == 2 and "no checkpoints/ folder" in r.output


def _grpo_prompts(tmp):
    "Arithmetic prompts with their answers (the reward's reference)."
    f = tmp / "problems.jsonl"
    rows = [{"prompt": f"What is {a} plus {b}?", "answer": a + b} for a, b in [(2, 3), (4, 4), (1, 6), (5, 2)]]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f


def test_grpo_runs_as_a_ledger_step_with_a_user_reward(lab, monkeypatch, tmp_path):
    from marin.core.ledger import Ledger
    from marin.models.io import load_model

    tmp, base, _, _, _ = lab
    monkeypatch.setenv("MARIN_PREFIX", str(tmp_path / "store"))
    (tmp_path / "postcli_rewards.py").write_text(
        "def brevity(completion, answer):\n    return 1.0 / (1 + len(completion))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    r = invoke("grpo", "--base", base, "--data", _grpo_prompts(tmp_path), "--steps", 2, "--batch-size", 2,
               "--group-size", 3, "--max-tokens", 8, "--reward", "exact_match", "--reward", "postcli_rewards:brevity",
               "--learning-rate", 1e-3, "--lora", 2)  # fmt: skip
    assert r.exit_code == 0, (r.output, r.exception)
    out = r.output.split("output: ")[1].split("\n")[0]
    rec = Ledger().sql("select step, status, output_path from runs where kind = 'step' and step like 'grpo/%'")
    assert list(zip(rec.step, rec.status, rec.output_path)) == [("grpo/base", "SUCCESS", out)]
    hist = [json.loads(x) for x in open(os.path.join(out, "history.jsonl"))]
    assert [h["step"] for h in hist] == [0, 1] and all(0 < h["reward/postcli_rewards:brevity"] <= 1 for h in hist)
    assert all(h["completion_length"] <= 8 and h["grad_norm"] > 0 for h in hist)
    policy, meta = load_model(out)  # the policy, LoRA merged, as a checkpoint the eval/export commands read
    assert meta["posttrain"] == "grpo" and meta["step"] == 2 and os.path.exists(os.path.join(out, "chat_template.json"))


def test_grpo_dry_run_and_bad_input(lab, monkeypatch, tmp_path):
    tmp, base, _, _, _ = lab
    monkeypatch.setenv("MARIN_PREFIX", str(tmp_path / "store"))
    good = _grpo_prompts(tmp_path)
    r = invoke(
        "grpo",
        "--base",
        base,
        "--data",
        good,
        "--steps",
        10,
        "--group-size",
        4,
        "--kl",
        0.04,
        "--max-tokens",
        32,
        "--dry-run",
    )
    assert r.exit_code == 0, (r.output, r.exception)
    for says in ("4 prompts", "10 steps x 4 prompts x 4 samples = 16 completions", "exact_match + format", "beta=0.04",
                 "KV cache", "What is 2 plus 3?"):  # fmt: skip
        assert says in r.output, (says, r.output)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "What is 1 plus 1?", "answer": 2}) + "\n" + json.dumps({"prompt": "x"}) + "\n")
    cases = [
        (["--data", bad, "--max-tokens", 32], f"{bad}:2: missing field 'answer'"),
        (
            ["--data", good, "--max-tokens", 32, "--reward", "no_such_mod_xyz:f"],
            "reward 'no_such_mod_xyz:f': cannot import",
        ),
        (["--data", good, "--max-tokens", 32, "--group-size", 1], "group_size"),
        (["--data", good, "--max-tokens", 200], f"{good}:1: the prompt is"),  # the tiny model's context is 128
    ]
    for extra, says in cases:
        r = invoke("grpo", "--base", base, *extra)
        assert r.exit_code == 2 and says in r.output, (extra, r.output, r.exception)
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").rglob("checkpoints"))  # nothing ran
