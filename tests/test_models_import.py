"""Importing a published checkpoint as a step: a folder that `transformers` wrote becomes a lab checkpoint whose
model gives the same logits, cached by the checksums of its files (two copies of one folder are one output)."""

import shutil
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from marin.core.executor import Executor
from marin.models.io import load_model
from marin.models.pretrained import import_step
from marin.models.transformer import forward
from conftest import tiny_transformers_model


def test_transformers_folder_imports_as_a_cached_lab_checkpoint(tmp_path):
    hf = tiny_transformers_model("Qwen2", tie_word_embeddings=True)
    hf.save_pretrained(tmp_path / "hub" / "qwen2", safe_serialization=True)
    shutil.copytree(tmp_path / "hub" / "qwen2", tmp_path / "elsewhere")
    ex = Executor(prefix=str(tmp_path / "store"))
    step = import_step(str(tmp_path / "hub" / "qwen2"))
    out = ex.run([step])[step]
    again = import_step(f"file://{tmp_path / 'elsewhere'}", name="qwen2")
    assert again.output_name == step.output_name and ex.run([again])[again] == out
    model, meta = load_model(out)
    assert meta["architecture"] == "Qwen2ForCausalLM" and model.cfg.qkv_bias and model.cfg.tie_embeddings
    toks = np.random.default_rng(0).integers(0, 80, (2, 40))
    with torch.no_grad():
        theirs = hf(torch.tensor(toks)).logits.numpy()
    np.testing.assert_allclose(np.asarray(forward(model, jnp.asarray(toks))), theirs, atol=1e-4, rtol=1e-4)


@pytest.fixture(scope="module")
def llama_folder(tmp_path_factory):
    "A transformers Llama with a BPE tokenizer (trained on the shared chat data) saved as a Hugging Face folder."
    from marin.core.settings import shared_data_dir
    from marin.data.tokenizers import train_bpe
    from marin.posttrain.sft import ChatTemplate, load_conversations, save_chat_template

    tmp = tmp_path_factory.mktemp("pretrained")
    convs = load_conversations(str(shared_data_dir() / "chat" / "dolly_1k_messages.jsonl"), limit=60)
    tok = train_bpe([ChatTemplate().render(c) for c in convs], 384)
    hf = tiny_transformers_model("Llama", vocab_size=tok.vocab_size, max_position_embeddings=128)
    hf.save_pretrained(tmp / "llama", safe_serialization=True)
    save_chat_template(str(tmp / "llama"), ChatTemplate(), tok)
    return tmp, hf, tok


def test_a_published_folder_goes_wherever_a_training_output_goes(llama_folder, monkeypatch):
    "`marin sample` and SFT take the folder itself: it is imported once through the cached step, in the ledger."
    from typer.testing import CliRunner
    from marin.core.ledger import Ledger
    from marin.posttrain.sft import SFTConfig, SFTDataConfig, sft_step
    from marin.train.cli import app

    tmp, hf, tok = llama_folder
    monkeypatch.setenv("MARIN_PREFIX", str(tmp / "store"))
    folder = str(tmp / "llama")
    prompt = "Human: What is a llama?"
    r = CliRunner().invoke(app, ["sample", folder, "--prompt", prompt, "--max-tokens", "12", "--temperature", "0"])
    assert r.exit_code == 0, (r.output, r.exception)
    ids = [int(t) for t in tok.encode(prompt)]
    with torch.no_grad():
        hf.generation_config.eos_token_id = None
        ref = hf.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False, pad_token_id=0)[0, len(ids) :]
    assert r.output.rstrip().endswith((prompt + tok.decode([int(t) for t in ref])).rstrip())  # transformers' text
    r = CliRunner().invoke(app, ["train", "--config", "nano", "--init-from", folder, "--dry-run", "--steps", "2"])
    assert "--init-from: the model is" in r.output and "cached" in r.output, (r.output, r.exception)  # import reused
    sc = SFTConfig(
        base=folder,
        data=SFTDataConfig(tokenizer=folder, seq_len=128, batch_size=2, limit=8),
        num_train_steps=2,
        progress=False,
        tracker="disabled",
    )
    st = sft_step(sc)
    assert st.config.base.name == "import/llama"  # the folder became the step that imports it
    res = Executor(prefix=str(tmp / "store")).run([st])
    imported = res[st.config.base]
    model, meta = load_model(res[st])
    assert meta["step"] == 2 and model.cfg == load_model(imported)[0].cfg
    steps = Ledger(str(tmp / "store" / "ledger")).sql("SELECT step, status FROM runs ORDER BY started_at")
    assert list(steps.step) == ["import/llama", "sft"] and set(steps.status) == {"SUCCESS"}, steps
