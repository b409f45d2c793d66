"""Hugging Face export/import: exported checkpoints load in `transformers` and give our logits within 1e-4 (fp32);
a checkpoint written by `transformers` imports and gives its logits; import -> export is bit-exact; a real
training run exports with a model card that states tokens, FLOPs and the ledger run id."""

import dataclasses, json, os
import equinox as eqx
import jax, jax.numpy as jnp, numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from marin.models.transformer import LlamaConfig, forward, generate, init
from conftest import tiny_transformers_model
from marin.serve.hf import export_checkpoint, export_hf, import_hf, read_hf_tensors, export_step, ExportConfig

VOCAB = [chr(c) for c in range(32, 128)]


def _random_model(cfg, seed=0):
    "A model with O(1) random weights everywhere (norm scales included), so every tensor matters."
    m = init(cfg, key=jax.random.PRNGKey(seed))
    leaves, tdef = jax.tree.flatten(m)
    keys = jax.random.split(jax.random.PRNGKey(seed + 1), len(leaves))
    new = [l * (1 + 0.5 * jax.random.normal(k, l.shape)) * (5.0 if l.ndim >= 2 else 1.0) for l, k in zip(leaves, keys)]
    return jax.tree.unflatten(tdef, new)


def _hf_logits(path, toks):
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    with torch.no_grad():
        return type(model).__name__, model(torch.tensor(np.asarray(toks))).logits.numpy()


CASES = {  # marin config fields -> the architecture they export as
    "gqa": dict(),
    "llama3-rope": dict(rope_scaling="llama3", rope_factor=4.0, rope_original_seq_len=16, rope_theta=500000.0),
    "ntk-rope-folded": dict(rope_scaling="ntk", rope_factor=4.0),
    "tied-qknorm-qwen3": dict(tie_embeddings=True, qk_norm=True),
    "mha-headdim-linear-rope": dict(n_kv_heads=4, head_dim=16, rope_scaling="linear", rope_factor=2.0),
    "qkv-bias-qwen2": dict(qkv_bias=True),
    "sliding-window-mistral": dict(sliding_window=8),  # 48-token rows: the window matters
}
ARCH = {
    "tied-qknorm-qwen3": "Qwen3ForCausalLM",
    "qkv-bias-qwen2": "Qwen2ForCausalLM",
    "sliding-window-mistral": "MistralForCausalLM",
}


@pytest.mark.parametrize("case", list(CASES))
def test_export_matches_transformers_logits(tmp_path, case):
    cfg = LlamaConfig(
        **{**dict(vocab_size=96, seq_len=48, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=48), **CASES[case]}
    )
    model = _random_model(cfg)
    if cfg.qkv_bias:  # biases start at zero: make them matter
        ks = jax.random.split(jax.random.PRNGKey(9), 3)
        new = tuple(
            0.5 * jax.random.normal(k, b.shape) for k, b in zip(ks, (model.blocks.bq, model.blocks.bk, model.blocks.bv))
        )
        model = eqx.tree_at(lambda m: (m.blocks.bq, m.blocks.bk, m.blocks.bv), model, new)
    export_hf(model, str(tmp_path), tokenizer=VOCAB)
    toks = np.random.default_rng(0).integers(0, 96, (2, 48))
    ours = np.asarray(forward(model, jnp.asarray(toks)))
    arch, theirs = _hf_logits(str(tmp_path), toks)
    assert arch == ARCH.get(case, "LlamaForCausalLM")
    assert np.abs(ours).max() > 1.0  # the comparison is not between near-zero logits
    # two float32 implementations that sum in different orders: their difference scales with the logits' size
    # (up to ~5 here); a wrong RoPE, norm or head layout is off by 0.1 or more
    np.testing.assert_allclose(ours, theirs, atol=1e-4 * max(1.0, float(np.abs(theirs).max())), rtol=1e-4)
    back, _ = import_hf(str(tmp_path))
    assert back.cfg == cfg


def test_transformers_written_checkpoint_imports_and_reexports_bit_exactly(tmp_path):
    hf = tiny_transformers_model("Llama")
    hf.save_pretrained(tmp_path / "hf", safe_serialization=True)
    model, _ = import_hf(str(tmp_path / "hf"))
    assert model.cfg.norm_eps == 1e-6 and model.cfg.n_kv_heads == 2
    toks = np.random.default_rng(1).integers(0, 80, (2, 40))
    with torch.no_grad():
        theirs = hf(torch.tensor(toks)).logits.numpy()
    np.testing.assert_allclose(np.asarray(forward(model, jnp.asarray(toks))), theirs, atol=1e-4, rtol=1e-4)
    # import -> export: every tensor bit-identical to what transformers wrote
    export_hf(model, str(tmp_path / "ours"))
    a, b = read_hf_tensors(str(tmp_path / "hf")), read_hf_tensors(str(tmp_path / "ours"))
    assert set(a) == set(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), k
    # and our own layout is a fixed point byte for byte, in bfloat16 too
    for dtype in ("float32", "bfloat16"):
        export_hf(model, str(tmp_path / f"x-{dtype}"), dtype=dtype, max_shard_bytes=30_000)
        again, _ = import_hf(str(tmp_path / f"x-{dtype}"))
        export_hf(again, str(tmp_path / f"y-{dtype}"), dtype=dtype, max_shard_bytes=30_000)
        files = sorted(os.listdir(tmp_path / f"x-{dtype}"))
        assert "model.safetensors.index.json" in files and files == sorted(os.listdir(tmp_path / f"y-{dtype}"))
        for f in files:
            assert (tmp_path / f"x-{dtype}" / f).read_bytes() == (tmp_path / f"y-{dtype}" / f).read_bytes(), (dtype, f)


HF_VARIANTS = {  # transformers classes built offline with random weights, and what marin must read from them
    "qwen2": ("Qwen2", dict(), dict(qkv_bias=True)),
    "mistral-window": ("Mistral", dict(sliding_window=8), dict(sliding_window=8)),
    "phi3-window": (  # fused qkv_proj and gate_up_proj, Mistral's window: a family added as one file (25f_phi3)
        "Phi3",
        dict(sliding_window=8, pad_token_id=0),
        dict(sliding_window=8, hf_architecture="Phi3ForCausalLM"),
    ),
    "gemma3": (  # soft-capping set, a local and a global layer, a window shorter than the sequence, tied embeddings
        "Gemma3",
        dict(
            head_dim=16,
            query_pre_attn_scalar=12,
            sliding_window=8,
            layer_types=["sliding_attention", "full_attention"],
            rope_theta=1e5,
            rope_local_base_freq=100.0,
            final_logit_softcapping=6.0,
            attn_logit_softcapping=20.0,  # transformers' Gemma 3 does not apply it: neither does marin (it warns)
            tie_word_embeddings=True,
        ),
        dict(sliding_window=8, global_layers=(1,), rope_local_theta=100.0, logit_softcap=6.0, norm_offset=1.0),
    ),
    "qwen3-moe": (  # a dense layer (mlp_only_layers) and an MoE one, unnormalised top-k weights, fused on load
        "Qwen3Moe",
        dict(
            head_dim=16,
            intermediate_size=40,
            moe_intermediate_size=24,
            num_experts=4,
            num_experts_per_tok=2,
            mlp_only_layers=[0],
            norm_topk_prob=False,
        ),
        {"qk_norm": True, "moe.renormalize": False, "moe.every": 2, "moe.d_expert": 24},  # MoE in layer 1 only,
    ),
}
N_GREEDY = 64
# the engine's decode compiles once per attention-length bucket (16, 32, 64, 128: 64 tokens after an 8-token prompt
# compiled 4 programs, ~7 CPU s of a variant's 20 at load); 24 tokens reach positions 8..31: past the window (8) three
# times over, across the 16 -> 32 bucket boundary (the cache read at a bucket's edge), 2 compiles
ENGINE_TOKENS = 24
# forward as one compiled program: op by op, a tiny MoE's or Gemma 3's first forward compiles each of its many small
# operations (9 CPU s for the Qwen3-MoE variant, 2.5 jitted); the same function, the same logits within float32 rounding
forward_jit = jax.jit(forward)


def _cfg_get(cfg, dotted: str):
    for part in dotted.split("."):
        cfg = getattr(cfg, part)
    return cfg


@pytest.mark.parametrize("variant", list(HF_VARIANTS))
def test_transformers_variants_import_to_the_same_logits_and_greedy_tokens(tmp_path, variant):
    from marin.serve.engine import Engine, SamplingParams
    from marin.serve.quantize import dequantize_tree, quantize_model

    arch, extra, want = HF_VARIANTS[variant]
    hf = tiny_transformers_model(arch, **{"max_position_embeddings": 128, **extra})  # room for 8 + 64 tokens
    hf.save_pretrained(tmp_path / "hf", safe_serialization=True)
    model, _ = import_hf(str(tmp_path / "hf"))
    assert all(_cfg_get(model.cfg, k) == v for k, v in want.items()), model.cfg
    toks = np.random.default_rng(1).integers(0, 80, (2, 40))
    with torch.no_grad():
        theirs = hf(torch.tensor(toks)).logits.numpy()
    ours = np.asarray(forward_jit(model, jnp.asarray(toks)))
    err = float(np.abs(ours - theirs).max())
    print(f"{variant}: max |logit diff| vs transformers {err:.2e} (max |logit| {np.abs(theirs).max():.1f})")
    assert err <= 1e-4 and np.abs(theirs).max() > 1.0
    if arch in ("Gemma3", "Qwen3Moe"):  # per-layer windows and RoPE bases, dense and MoE layers: the scan agrees
        scan = dataclasses.replace(model, cfg=model.cfg.replace(layer_loop="scan"))
        assert np.abs(np.asarray(forward_jit(scan, jnp.asarray(toks))) - ours).max() <= 1e-5
    if "sliding_window" in want:  # the window is what makes these logits agree: without it they do not
        wide = dataclasses.replace(model, cfg=model.cfg.replace(sliding_window=model.cfg.seq_len))
        assert np.abs(np.asarray(forward_jit(wide, jnp.asarray(toks))) - theirs).max() > 1e-2
    prompt = [int(t) for t in toks[0, :8]]
    with torch.no_grad():
        hf.generation_config.eos_token_id = None  # N_GREEDY tokens whatever they are (no stop, no EOS ban)
        ref = hf.generate(torch.tensor([prompt]), max_new_tokens=N_GREEDY, do_sample=False, pad_token_id=0)[0, 8:]
    ref = [int(t) for t in ref]
    assert generate(model, prompt, N_GREEDY, key=jax.random.PRNGKey(0), temperature=0.0) == ref
    if arch in ("Gemma3", "Qwen3Moe"):  # the serving engine (tests/test_serve_engine.py covers the Llama family)
        greedy = SamplingParams(max_tokens=ENGINE_TOKENS, temperature=0.0)
        with Engine(model, max_batch=2) as eng:  # its KV cache: the same tokens
            assert eng.generate([prompt], greedy)[0].tokens == ref[:ENGINE_TOKENS]
        # int8 weights: the engine's tokens are the dequantized model's argmaxes
        q = quantize_model(model, "int8")
        with Engine(q, max_batch=2) as eng:
            out = eng.generate([prompt], SamplingParams(max_tokens=8, temperature=0.0))[0].tokens
        assert out == generate(dequantize_tree(q), prompt, 8, key=jax.random.PRNGKey(0), temperature=0.0)
    export_hf(model, str(tmp_path / "ours"))  # and back: the same tensors, the same architecture, the same logits
    a, b = read_hf_tensors(str(tmp_path / "hf")), read_hf_tensors(str(tmp_path / "ours"))
    assert set(a) == set(b) and all(a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]) for k in a)
    assert json.loads((tmp_path / "ours" / "config.json").read_text())["architectures"] == [f"{arch}ForCausalLM"]
    name, again = _hf_logits(str(tmp_path / "ours"), toks)
    assert name == f"{arch}ForCausalLM" and np.array_equal(again, theirs), float(np.abs(again - theirs).max())


def test_bfloat16_export_loads_in_transformers(tmp_path):
    cfg = LlamaConfig(vocab_size=96, seq_len=32, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=48)
    model = _random_model(cfg, 3)
    export_hf(model, str(tmp_path), dtype="bfloat16")
    assert json.loads((tmp_path / "config.json").read_text())["dtype"] == "bfloat16"
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path))
    assert next(hf.parameters()).dtype == torch.bfloat16
    back, _ = import_hf(str(tmp_path))
    toks = np.random.default_rng(0).integers(0, 96, (1, 32))
    with torch.no_grad():
        theirs = hf.float()(torch.tensor(toks)).logits.numpy()
    np.testing.assert_allclose(np.asarray(forward(back, jnp.asarray(toks))), theirs, atol=1e-4, rtol=1e-4)


def test_training_run_exports_with_model_card(lab, monkeypatch):
    monkeypatch.setenv("MARIN_TRACKER", "disabled")
    from marin.core.executor import Executor
    from marin.train.checkpoint import CheckpointConfig
    from marin.train.optim import OptimizerConfig
    from marin.train.trainer import CharDataConfig, TrainConfig, train_step

    cfg = TrainConfig(
        model=LlamaConfig(vocab_size=65, seq_len=32, d_model=32, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=64),
        data=CharDataConfig(batch_size=4, seq_len=32),
        num_train_steps=3,
        progress=False,
        tracker="disabled",
        optimizer=OptimizerConfig(learning_rate=3e-3, warmup=1),
        checkpoint=CheckpointConfig(every=0, async_write=False),
    )
    tr = train_step(cfg, "train/tiny")
    ex = Executor(str(lab / "store"), verbose=False)
    exp = export_step(ExportConfig(checkpoint=tr), "export/tiny")
    ex.run([tr, exp])
    out = ex.output_path(exp)
    card = open(os.path.join(out, "README.md")).read()
    run_id = json.load(open(os.path.join(ex.output_path(tr), ".executor_status.json")))["run_id"]
    assert run_id in card and "| tokens | 384 |" in card and "training FLOPs" in card and "| step | 3 |" in card
    flops = cfg.model.flops_per_token(32) * 384
    assert f"{flops:.3e}" in card
    tok = transformers.AutoTokenizer.from_pretrained(out)
    vocab = json.load(open(os.path.join(ex.output_path(tr), "vocab.json")))
    text = "First Citizen:\nBefore we proceed"
    assert tok(text).input_ids == [vocab.index(c) for c in text] and tok.decode(tok(text).input_ids) == text
    from marin.models.io import load_model

    ours, _ = load_model(ex.output_path(tr))
    toks = np.array([[vocab.index(c) for c in text]])
    _, theirs = _hf_logits(out, toks)
    np.testing.assert_allclose(np.asarray(forward(ours, jnp.asarray(toks))), theirs, atol=1e-4, rtol=1e-4)


def test_unsupported_checkpoints_are_refused_with_a_reason(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["MixtralForCausalLM"], "num_local_experts": 8}))
    with pytest.raises(ValueError, match="num_experts_per_tok"):
        import_hf(str(tmp_path))  # Mixtral: tests/test_serve_moe.py
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
    with pytest.raises(ValueError, match="not supported"):
        import_hf(str(tmp_path))
    gemma = dict(architectures=["Gemma3ForCausalLM"], vocab_size=80, hidden_size=32, intermediate_size=64)
    gemma.update(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
    for bad, field in (
        (dict(hidden_activation="gelu"), "hidden_activation"),
        (dict(attention_bias=True), "attention_bias"),
    ):
        (tmp_path / "config.json").write_text(json.dumps(dict(gemma, **bad)))
        with pytest.raises(ValueError, match=field):
            import_hf(str(tmp_path))
    q3 = dict(gemma, architectures=["Qwen3MoeForCausalLM"], num_experts=4, num_experts_per_tok=2, hidden_act="silu")
    (tmp_path / "config.json").write_text(json.dumps(dict(q3, num_hidden_layers=3, mlp_only_layers=[1])))
    with pytest.raises(ValueError, match="mlp_only_layers"):  # MoE in layers 0 and 2: no (first_dense, every)
        import_hf(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="config.json"):
        import_hf(str(tmp_path / "nothing"))
