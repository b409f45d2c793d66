"""LoRA end to end on a tiny model: SFT and DPO train only the adapter (the base stays bit-identical, the checkpoint
holds the adapter and its optimizer state), the merged export loads in `transformers` and the PEFT-layout adapter
loads with `peft` onto the exported base, both to the lab's logits; a killed LoRA run resumes bit for bit."""

import json, os, shutil
import numpy as np
import pytest

os.environ.setdefault("WANDB_MODE", "offline")

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")  # every name PEFT maps


@pytest.fixture(scope="module")
def lora_sft(tmp_path_factory):
    "A tiny pretrained run, then 4 steps of LoRA SFT on the shared chat data (every projection targeted)."
    from marin.core.storage import file_checksum
    from marin.core.settings import shared_data_dir
    from marin.data.tokenizers import train_bpe
    from marin.models.lora import LoraConfig
    from marin.models.transformer import LlamaConfig
    from marin.posttrain.sft import ChatTemplate, SFTConfig, SFTDataConfig, load_conversations, run_sft
    from marin.posttrain.sft import save_chat_template
    from marin.models.pretrained import write_model_checkpoint
    from marin.models.transformer import init
    from marin.core.config import canonical
    from marin.train.optim import OptimizerConfig
    import jax

    tmp = tmp_path_factory.mktemp("lora")
    os.environ["MARIN_PREFIX"] = str(tmp / "store")
    convs = load_conversations(str(shared_data_dir() / "chat" / "dolly_1k_messages.jsonl"), limit=40)
    tok = train_bpe([ChatTemplate().render(c) for c in convs], 300)
    save_chat_template(str(tmp / "tok"), ChatTemplate(), tok)
    cfg = LlamaConfig(vocab_size=tok.vocab_size, seq_len=96, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64)
    meta = {"model_config": canonical(cfg), "model_config_versioned": canonical(cfg, versioned_only=True)}
    write_model_checkpoint(str(tmp / "base"), init(cfg, key=jax.random.PRNGKey(0)), meta, step=1)  # a "pretrained" base
    base_ck = tmp / "base" / "checkpoints" / "step_00000001" / "state.safetensors"
    before = file_checksum(str(base_ck))
    lora = LoraConfig(rank=4, alpha=8.0, dropout=0.1, target_modules=TARGETS)
    sc = SFTConfig(
        base=str(tmp / "base"),
        data=SFTDataConfig(tokenizer=str(tmp / "tok"), seq_len=96, batch_size=4, limit=24),
        num_train_steps=4,
        optimizer=OptimizerConfig(learning_rate=2e-2, warmup=1, weight_decay=0.0),
        progress=False,
        tracker="disabled",
        log_every=2,
        lora=lora,
    )
    run_sft(sc, str(tmp / "sft"))
    return dict(tmp=tmp, cfg=cfg, tok=tok, lora=lora, sc=sc, before=before, base_ck=base_ck)


def test_lora_sft_trains_only_the_adapter(lora_sft):
    import jax, jax.numpy as jnp, equinox as eqx
    from marin.core.storage import file_checksum
    from marin.models.io import checkpoint_path, load_model, read_arrays, read_lora
    from marin.models.lora import adapter_size
    from marin.models.transformer import count_params, next_token_loss

    t, lora = lora_sft["tmp"], lora_sft["lora"]
    out = str(t / "sft")
    hist = [json.loads(l) for l in open(os.path.join(out, "history.jsonl"))]
    assert len(hist) == 4
    # step 0 trains the adapted model at init, which is the base: the same loss as the base on that batch
    base, _ = load_model(str(t / "base"))
    b = lora_sft["sc"].data.build().batch(0)
    base_loss = float(eqx.filter_jit(next_token_loss)(base, {k: jnp.asarray(v) for k, v in b.items()})[0])
    assert abs(base_loss - hist[0]["loss"]) < 1e-5, (base_loss, hist[0])
    # the base is untouched: its checkpoint file, and the base the adapter is read onto, bit for bit
    assert file_checksum(str(lora_sft["base_ck"])) == lora_sft["before"]
    path = checkpoint_path(out)
    frozen, adapter, lc = read_lora(path)
    assert lc == lora
    assert all(
        bool((x == y).all())
        for x, y in zip(
            jax.tree.leaves(eqx.filter(frozen, eqx.is_array)), jax.tree.leaves(eqx.filter(base, eqx.is_array))
        )
    )
    assert all(float(jnp.abs(getattr(adapter, n).b).max()) > 0 for n in TARGETS)  # every adapter was trained
    # the checkpoint: the adapter, its two Adam moments, the optimizer's counts, the step and the key; nothing else
    arrays = read_arrays(path)
    n_ad = adapter_size(adapter)
    params = {k for k in arrays if k.startswith(".params.")}
    assert params == {f".params.{n}.{ab}" for n in TARGETS for ab in "ab"}
    moments = {k for k in arrays if ".mu." in k or ".nu." in k}
    assert len(moments) == 2 * len(params) and sum(arrays[k].size for k in moments) == 2 * n_ad
    rest = set(arrays) - params - moments
    assert all(arrays[k].size <= 2 for k in rest), {k: arrays[k].shape for k in rest}  # counts, step, key
    total = sum(a.nbytes for a in arrays.values())
    assert total <= 3 * 4 * n_ad + 64 and 3 * n_ad < count_params(base) // 2, (total, n_ad, count_params(base))
    meta = json.load(open(os.path.join(path, "meta.json")))
    assert meta["lora_base"] == {"checkpoint": str(t / "base"), "step": 1} and meta["step"] == 4


def _hf_logits(folder, toks, adapter=None):
    import torch, transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    if adapter is not None:
        import peft

        model = peft.PeftModel.from_pretrained(model, adapter).eval()
    with torch.no_grad():
        return model(torch.tensor(np.asarray(toks), dtype=torch.long)).logits.numpy()


def test_lora_exports_merged_and_as_peft_adapter(lora_sft):
    import jax, jax.numpy as jnp, equinox as eqx
    from marin.models.io import load_model
    from marin.models.transformer import forward
    from marin.serve.hf import ExportConfig, export_checkpoint, run_export

    t = lora_sft["tmp"]
    out = str(t / "sft")
    merged, _ = load_model(out)
    base, _ = load_model(str(t / "base"))
    toks = jax.random.randint(jax.random.PRNGKey(0), (2, 24), 0, lora_sft["cfg"].vocab_size)
    fwd = eqx.filter_jit(forward)  # one compile for both models (eager ops would each compile)
    ours = np.asarray(fwd(merged, toks))
    assert np.abs(ours - np.asarray(fwd(base, toks))).max() > 1e-3  # the adapter changes the logits
    export_checkpoint(out, str(t / "hf_merged"))
    assert np.abs(_hf_logits(str(t / "hf_merged"), toks) - ours).max() <= 1e-4
    s = run_export(ExportConfig(checkpoint=out, lora_adapter=True), str(t / "adapter"))  # the base in adapter/base
    cfg = json.load(open(t / "adapter" / "adapter_config.json"))
    assert cfg["r"] == 4 and cfg["lora_alpha"] == 8 and sorted(cfg["target_modules"]) == sorted(TARGETS)
    from safetensors.numpy import load_file

    names = load_file(str(t / "adapter" / "adapter_model.safetensors"))
    assert "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight" in names and len(names) == 2 * 2 * 7
    assert s["export/n_params"] == sum(a.size for a in names.values()) and cfg["base_model_name_or_path"].endswith(
        "base"
    )
    peft_logits = _hf_logits(str(t / "adapter" / "base"), toks, adapter=str(t / "adapter"))
    assert np.abs(peft_logits - ours).max() <= 1e-4, np.abs(peft_logits - ours).max()


def test_lora_dpo_reference_is_the_base(lora_sft, monkeypatch):
    import math
    import jax.numpy as jnp, equinox as eqx
    from marin.models.io import load_model, read_arrays, checkpoint_path
    from marin.models.lora import LoraConfig
    from marin.posttrain.dpo import DPOConfig, PreferenceDataConfig, dpo_loss, run_dpo
    from marin.train.optim import OptimizerConfig

    t = lora_sft["tmp"]
    data = PreferenceDataConfig(tokenizer=str(t / "tok"), from_chat=True, seq_len=64, batch_size=2, limit=8)
    dc = DPOConfig(
        base=str(t / "base"),
        data=data,
        beta=0.5,
        num_train_steps=4,
        checkpoint_every=3,
        progress=False,
        tracker="disabled",
        optimizer=OptimizerConfig(learning_rate=2e-2, warmup=1, weight_decay=0.0),
        lora=LoraConfig(rank=2, target_modules=("q_proj", "v_proj", "up_proj")),
    )
    out = str(t / "dpo")
    run_dpo(dc, out)
    hist = [json.loads(l) for l in open(os.path.join(out, "history.jsonl"))]
    assert abs(hist[0]["loss"] - math.log(2)) < 1e-6  # adapter at init: policy == reference
    assert {k for k in read_arrays(checkpoint_path(out)) if k.startswith(".params")} == {
        f".params.{n}.{ab}" for n in ("q_proj", "v_proj", "up_proj") for ab in "ab"
    }
    # step 3's loss, recomputed from the step-3 checkpoint's policy and the base as the reference (adapter off)
    policy, meta = load_model(out, 3)
    base, _ = load_model(str(t / "base"))
    b = {k: jnp.asarray(v) for k, v in data.build().batch(3).items()}
    loss, _ = eqx.filter_jit(dpo_loss)(policy, base, b, 0.5)
    assert meta["posttrain"] == "dpo" and abs(float(loss) - hist[3]["loss"]) < 1e-5, (float(loss), hist[3])
    assert abs(hist[3]["loss"] - math.log(2)) > 1e-3  # the adapter moved the policy away from the reference


def test_lora_training_resumes_bit_for_bit(tmp_path, monkeypatch):
    "A LoRA run on a freshly initialised base, killed after its step-2 checkpoint, resumes to the same state."
    from marin.models.lora import LoraConfig
    from marin.models.transformer import LlamaConfig
    from marin.train.checkpoint import CheckpointConfig
    from marin.train.optim import OptimizerConfig
    from marin.train.trainer import SyntheticDataConfig, TrainConfig, final_params_hash, train

    monkeypatch.setenv("MARIN_PREFIX", str(tmp_path / "store"))
    cfg = TrainConfig(
        model=LlamaConfig(vocab_size=64, seq_len=16, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64),
        data=SyntheticDataConfig(vocab_size=64, batch_size=4, seq_len=16),
        num_train_steps=4,
        optimizer=OptimizerConfig(learning_rate=1e-2, warmup=1),
        peak_flops=1e12,  # no matmul measured for the MFU figure
        checkpoint=CheckpointConfig(every=2, keep_last=3, async_write=False),
        lora=LoraConfig(rank=2, dropout=0.2, target_modules=("q_proj", "down_proj")),
        progress=False,
        tracker="disabled",
    )
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    train(cfg, a)
    shutil.copytree(a, b)
    shutil.rmtree(os.path.join(b, "checkpoints", "step_00000004"))  # killed between the step-2 and final saves
    s = train(cfg, b)
    assert s["train/resumed_from"] == 2 and final_params_hash(a) == final_params_hash(b)
    ha, hb = (open(os.path.join(d, "history.jsonl")).read() for d in (a, b))
    assert ha == hb
