"SFT end to end: a tiny pretrained run, fine-tuned on shared chat data through the ordinary trainer."

import json, os
import numpy as np
import pytest

os.environ.setdefault("WANDB_MODE", "offline")


@pytest.fixture(scope="module")
def base_run(tmp_path_factory):
    from marin.data.tokenizers import train_bpe
    from marin.models.transformer import LlamaConfig
    from marin.posttrain.sft import ChatTemplate, load_conversations, save_chat_template
    from marin.core.settings import shared_data_dir
    from marin.train.trainer import SyntheticDataConfig, TrainConfig, train
    from marin.train.optim import OptimizerConfig

    tmp = tmp_path_factory.mktemp("sft")
    convs = load_conversations(str(shared_data_dir() / "chat" / "dolly_1k_messages.jsonl"), limit=60)
    tok = train_bpe([ChatTemplate().render(c) for c in convs], 384)
    save_chat_template(str(tmp / "tok"), ChatTemplate(), tok)
    cfg = LlamaConfig(vocab_size=tok.vocab_size, seq_len=128, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64)
    tc = TrainConfig(
        model=cfg,
        data=SyntheticDataConfig(vocab_size=tok.vocab_size, batch_size=2, seq_len=32),
        num_train_steps=2,
        optimizer=OptimizerConfig(learning_rate=1e-3),
        progress=False,
        tracker="disabled",
    )
    train(tc, str(tmp / "base"))
    return tmp, tok, cfg


def test_sft_starts_from_base_and_learns_assistant_tokens(base_run, monkeypatch):
    import jax, jax.numpy as jnp, equinox as eqx
    from marin.posttrain.sft import SFTConfig, SFTDataConfig, run_sft, load_chat_template
    from marin.models.io import load_model
    from marin.train.checkpoint import list_checkpoints
    from marin.train.optim import OptimizerConfig
    from marin.data.tokenizers import checkpoint_tokenizer

    tmp, tok, cfg = base_run
    monkeypatch.setenv("MARIN_PREFIX", str(tmp / "store"))
    data = SFTDataConfig(tokenizer=str(tmp / "tok"), seq_len=128, batch_size=4, limit=40)
    sc = SFTConfig(
        base=str(tmp / "base"),
        data=data,
        num_train_steps=12,
        optimizer=OptimizerConfig(learning_rate=3e-3, warmup=1, weight_decay=0.0),
        progress=False,
        tracker="disabled",
        log_every=4,
    )
    out = str(tmp / "sft")
    summary = run_sft(sc, out)
    hist = [json.loads(l) for l in open(os.path.join(out, "history.jsonl"))]
    assert len(hist) == 12 and hist[-1]["loss"] < hist[0]["loss"] - 0.3, (hist[0], hist[-1])
    assert summary["data/sft_conversations"] == 40 and summary["data/sft_rows"] > 0
    # the first step trained the base weights: its loss equals the base model's loss on that batch
    base, _ = load_model(str(tmp / "base"))
    from marin.models.transformer import next_token_loss

    b = data.build().batch(0)
    base_loss = float(next_token_loss(base, {k: jnp.asarray(v) for k, v in b.items()})[0])
    assert abs(base_loss - hist[0]["loss"]) < 1e-3, (base_loss, hist[0]["loss"])
    tuned, meta = load_model(out)
    assert meta["step"] == 12 and [s for s, _ in list_checkpoints(os.path.join(out, "checkpoints"))][-1] == 12
    # tokenizer and chat template travel with the output
    assert (
        load_chat_template(out).assistant_prefix == "Assistant: "
        and checkpoint_tokenizer(out).vocab_size == tok.vocab_size
    )


def test_dpo_from_chat_pairs_raises_margin(base_run, monkeypatch):
    from marin.posttrain.dpo import DPOConfig, PreferenceDataConfig, run_dpo
    from marin.models.io import load_model
    from marin.train.optim import OptimizerConfig

    tmp, tok, cfg = base_run
    monkeypatch.setenv("MARIN_PREFIX", str(tmp / "store"))
    data = PreferenceDataConfig(tokenizer=str(tmp / "tok"), from_chat=True, seq_len=96, batch_size=4, limit=16)
    dc = DPOConfig(
        base=str(tmp / "base"),
        data=data,
        beta=0.5,
        num_train_steps=10,
        progress=False,
        tracker="disabled",
        log_every=5,
        optimizer=OptimizerConfig(learning_rate=3e-3, warmup=1, weight_decay=0.0),
    )
    out = str(tmp / "dpo")
    s = run_dpo(dc, out)
    hist = [json.loads(l) for l in open(os.path.join(out, "history.jsonl"))]
    assert (
        abs(hist[0]["loss"] - np.log(2)) < 1e-5 and abs(hist[0]["dpo/reward_margin"]) < 1e-5
    )  # policy == reference at step 0
    assert s["train/dpo/reward_margin"] > 0 and s["train/final_loss"] < np.log(2)
    model, meta = load_model(out)
    assert meta["step"] == 10 and meta["posttrain"] == "dpo" and model.cfg == cfg


CHATML = (
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def test_padded_sft_loss_equals_transformers(tmp_path):
    """A Hugging Face model imported by the import step, on its own chat template (template="from_tokenizer", read
    from the files the import copies), padded SFT rows: the lab's per-token loss on one batch equals `transformers`'
    with labels = -100 where the loss mask is 0."""
    import equinox as eqx, jax.numpy as jnp, torch
    from conftest import tiny_transformers_model
    from marin.core.settings import shared_data_dir
    from marin.data.tokenizers import EOS, PAD, train_bpe
    from marin.models.hf import import_hf
    from marin.models.io import load_model
    from marin.models.pretrained import import_pretrained, import_step
    from marin.models.transformer import forward, next_token_loss
    from marin.posttrain.chat_template import JinjaChatTemplate
    from marin.posttrain.sft import SFTDataConfig, load_conversations

    convs = load_conversations(str(shared_data_dir() / "chat" / "dolly_1k_messages.jsonl"), limit=8)
    (tmp_path / "chat.jsonl").write_text("\n".join(json.dumps({"messages": c}) for c in convs))
    tok = train_bpe(
        [m["content"] for c in convs for m in c], 320, special_tokens=(EOS, PAD, "<|im_start|>", "<|im_end|>")
    )
    d = tmp_path / "hf"
    hf = tiny_transformers_model("Llama", vocab_size=tok.vocab_size, max_position_embeddings=128)
    hf.save_pretrained(d)
    tok.save(str(d))
    (d / "chat_template.jinja").write_text(CHATML)
    (d / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>", "pad_token": PAD}))
    lab = str(tmp_path / "imported")  # the import step's output: a lab checkpoint with the tokenizer files beside it
    import_pretrained(import_step(str(d)).config, lab)
    model, _ = load_model(lab)
    assert model.cfg == import_hf(str(d))[0].cfg
    data = SFTDataConfig(
        str(tmp_path / "chat.jsonl"), lab, template="from_tokenizer", seq_len=128, batch_size=4, packing=False
    )
    loader = data.build()
    assert isinstance(loader.template, JinjaChatTemplate) and loader.template.source == CHATML
    b = loader.batch(0)
    toks, seg, mask = b["tokens"], b["segment_ids"], b["loss_mask"]
    assert (seg == 0).any() and mask.sum() > 10 and (mask[seg == 0] == 0).all() and (toks[seg == 0] == tok.pad_id).all()
    both = eqx.filter_jit(lambda m, x: (next_token_loss(m, x), forward(m, x["tokens"], x["segment_ids"])))
    (ours, aux), logits = both(model, {k: jnp.asarray(v) for k, v in b.items()})  # one compile: cheaper than eager
    logits = np.asarray(logits)
    labels = np.full(toks.shape, -100, np.int64)
    labels[:, 1:] = np.where(mask[:, :-1] > 0, toks[:, 1:], -100)
    with torch.no_grad():
        out = hf(
            input_ids=torch.tensor(toks, dtype=torch.long),
            attention_mask=torch.tensor(seg > 0, dtype=torch.long),
            labels=torch.tensor(labels),
        )
    assert abs(float(ours) - float(out.loss)) < 1e-4, (float(ours), float(out.loss))
    # token by token, at every target
    lse = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
    ref = torch.nn.functional.cross_entropy(
        out.logits[:, :-1].transpose(1, 2), torch.tensor(labels[:, 1:]), reduction="none"
    ).numpy()
    sel = mask[:, :-1] > 0
    per_ours = lse[:, :-1] - np.take_along_axis(logits[:, :-1], toks[:, 1:, None], -1)[..., 0]
    assert np.abs(per_ours[sel] - ref[sel]).max() < 1e-4 and int(sel.sum()) == int(aux["n_tokens"])
