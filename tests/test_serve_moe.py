"""MoE ↔ Hugging Face Mixtral: an exported marin MoE checkpoint loads in `transformers` MixtralForCausalLM and gives
our logits within 1e-4 (fp32); a Mixtral written by `transformers` imports, gives its logits, and re-exports
bit-exactly; what Mixtral cannot express is refused naming the field; the serving engine (KV cache, quantized or not)
generates the same greedy tokens as the model's plain forward."""

import dataclasses, json, os
import equinox as eqx
import jax, jax.numpy as jnp, numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from marin.models.moe import MoEConfig
from marin.models.transformer import LlamaConfig, forward, init
from marin.serve.engine import Engine, SamplingParams
from marin.serve.hf import export_hf, import_hf, read_hf_tensors
from conftest import tiny_transformers_model

VOCAB = [chr(c) for c in range(32, 128)]
BASE = dict(vocab_size=96, seq_len=48, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=48)


def _random_model(cfg, seed=0):
    "O(1) random weights everywhere (norm scales included), so every tensor matters; the router bias stays zero."
    m = init(cfg, key=jax.random.PRNGKey(seed))
    bias = m.blocks.moe.router_bias
    leaves, tdef = jax.tree.flatten(m)
    keys = jax.random.split(jax.random.PRNGKey(seed + 1), len(leaves))
    new = [l * (1 + 0.5 * jax.random.normal(k, l.shape)) * (5.0 if l.ndim >= 2 else 1.0) for l, k in zip(leaves, keys)]
    return eqx.tree_at(lambda t: t.blocks.moe.router_bias, jax.tree.unflatten(tdef, new), bias)


def _hf(path):
    return transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


# forward as one compiled program: op by op, a tiny MoE's first forward compiles each of its many small operations
# (8 CPU s, 2.3 jitted); the same function, the same logits within float32 rounding
forward_jit = jax.jit(forward)


CASES = {
    "top2-of-4-gqa": dict(moe=MoEConfig(n_experts=4, top_k=2, balance="switch")),
    "top3-of-8-expert-width-llama3-rope-tied-mha": dict(
        moe=MoEConfig(n_experts=8, top_k=3, d_expert=24, balance="none"),
        tie_embeddings=True,
        rope_scaling="llama3",
        rope_factor=4.0,
        rope_original_seq_len=16,
        rope_theta=500000.0,
        n_kv_heads=4,
        head_dim=16,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_moe_export_matches_transformers_mixtral_logits(tmp_path, case):
    cfg = LlamaConfig(**{**BASE, **CASES[case]})
    model = _random_model(cfg)
    s = export_hf(model, str(tmp_path), tokenizer=VOCAB)
    assert s["architecture"] == "MixtralForCausalLM"
    toks = np.random.default_rng(0).integers(0, 96, (2, 48))
    ours = np.asarray(forward_jit(model, jnp.asarray(toks)))
    hf = _hf(str(tmp_path))
    assert type(hf).__name__ == "MixtralForCausalLM"
    with torch.no_grad():
        theirs = hf(torch.tensor(toks)).logits.numpy()
    assert np.abs(ours).max() > 1.0
    err = float(np.abs(ours - theirs).max())
    print(f"{case}: max |logit diff| {err:.2e} (max |logit| {np.abs(ours).max():.1f})")
    np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=1e-4)
    back, _ = import_hf(str(tmp_path))
    assert back.cfg == cfg
    assert all(bool((a == b).all()) for a, b in zip(jax.tree.leaves(model), jax.tree.leaves(back)))


def _tiny_transformers_mixtral(seed: int):
    "A 2-layer, 4-expert Mixtral built by transformers itself, its random weights perturbed so that every tensor matters."
    return tiny_transformers_model("Mixtral", seed, intermediate_size=40, num_local_experts=4, num_experts_per_tok=2)


def test_transformers_mixtral_imports_and_reexports_bit_exactly(tmp_path):
    hf = _tiny_transformers_mixtral(seed=0)
    hf.save_pretrained(tmp_path / "hf", safe_serialization=True)
    model, _ = import_hf(str(tmp_path / "hf"))
    m = model.cfg.moe
    assert (m.n_experts, m.top_k, m.router, m.n_shared_experts, m.dispatch) == (4, 2, "softmax", 0, "dropless")
    assert model.cfg.rope_theta == 1e6 and model.cfg.norm_eps == 1e-6 and model.cfg.d_ff == 40
    toks = np.random.default_rng(1).integers(0, 80, (2, 40))
    with torch.no_grad():
        theirs = hf(torch.tensor(toks)).logits.numpy()
    ours = np.asarray(forward_jit(model, jnp.asarray(toks)))
    print(f"transformers-written Mixtral: max |logit diff| {float(np.abs(ours - theirs).max()):.2e}")
    np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=1e-4)
    # import -> export: every tensor (names, dtypes, values) identical to what transformers wrote
    export_hf(model, str(tmp_path / "ours"))
    a, b = read_hf_tensors(str(tmp_path / "hf")), read_hf_tensors(str(tmp_path / "ours"))
    assert set(a) == set(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), k
    # our own Mixtral layout is a fixed point byte for byte, sharded with an index, in float32 and bfloat16
    for dtype in ("float32", "bfloat16"):
        export_hf(
            model,
            str(tmp_path / f"x-{dtype}"),
            dtype=dtype,
            max_shard_bytes=40_000,
            tokenizer=[chr(c) for c in range(32, 112)],
        )
        again, _ = import_hf(str(tmp_path / f"x-{dtype}"))
        export_hf(
            again,
            str(tmp_path / f"y-{dtype}"),
            dtype=dtype,
            max_shard_bytes=40_000,
            tokenizer=[chr(c) for c in range(32, 112)],
        )
        files = sorted(os.listdir(tmp_path / f"x-{dtype}"))
        assert {"model.safetensors.index.json", "tokenizer.json", "generation_config.json", "README.md"} <= set(files)
        assert files == sorted(os.listdir(tmp_path / f"y-{dtype}"))
        for f in files:
            assert (tmp_path / f"x-{dtype}" / f).read_bytes() == (tmp_path / f"y-{dtype}" / f).read_bytes(), (dtype, f)
    assert json.loads((tmp_path / "x-float32" / "config.json").read_text())["architectures"] == ["MixtralForCausalLM"]
    assert "| experts | 4 per layer, top-2" in (tmp_path / "x-float32" / "README.md").read_text()


def test_transformers5_fused_expert_layout_imports_with_transformers_logits(tmp_path):
    """transformers >= 5 holds Mixtral experts fused (`mlp.experts.gate_up_proj` [E, 2F, D], gate rows first;
    `mlp.experts.down_proj` [E, D, F]; router `mlp.gate.weight`) and writes that layout with
    save_pretrained(save_original_format=False). It imports to the same model as the default per-expert save,
    gives transformers' logits, passes the dry run, and re-exports as the per-expert layout transformers writes."""
    import inspect

    if "save_original_format" not in inspect.signature(transformers.PreTrainedModel.save_pretrained).parameters:
        pytest.skip(f"transformers {transformers.__version__} has no fused expert layout")
    from marin.serve.server import inspect_model

    hf = _tiny_transformers_mixtral(seed=1)
    hf.save_pretrained(tmp_path / "fused", safe_serialization=True, save_original_format=False)
    hf.save_pretrained(tmp_path / "per-expert", safe_serialization=True)
    fused = read_hf_tensors(str(tmp_path / "fused"))
    assert fused["model.layers.1.mlp.experts.gate_up_proj"].shape == (4, 80, 32)
    assert fused["model.layers.1.mlp.experts.down_proj"].shape == (4, 32, 40) and fused[
        "model.layers.1.mlp.gate.weight"
    ].shape == (4, 32)
    assert not any(".block_sparse_moe." in k for k in fused)
    model, _ = import_hf(str(tmp_path / "fused"))
    legacy, _ = import_hf(str(tmp_path / "per-expert"))
    assert model.cfg == legacy.cfg
    assert all(bool((a == b).all()) for a, b in zip(jax.tree.leaves(model), jax.tree.leaves(legacy)))
    toks = np.random.default_rng(2).integers(0, 80, (2, 40))
    ours = np.asarray(forward_jit(model, jnp.asarray(toks)))
    for name, ref in (("in memory", hf), ("reloaded from the fused files", _hf(str(tmp_path / "fused")))):
        with torch.no_grad():
            theirs = ref(torch.tensor(toks)).logits.numpy()
        err = float(np.abs(ours - theirs).max())
        print(f"fused transformers Mixtral ({name}): max |logit diff| {err:.2e} (max |logit| {np.abs(ours).max():.1f})")
        np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=1e-4)
    rep = inspect_model(str(tmp_path / "fused"))  # the dry run reads the fused names too
    assert (
        rep["architecture"] == "MixtralForCausalLM"
        and rep["params"] == inspect_model(str(tmp_path / "per-expert"))["params"]
    )
    export_hf(model, str(tmp_path / "ours"))  # export: the per-expert layout, identical to transformers' default save
    a, b = read_hf_tensors(str(tmp_path / "per-expert")), read_hf_tensors(str(tmp_path / "ours"))
    assert set(a) == set(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), k


def test_what_mixtral_cannot_express_is_refused_naming_the_field(tmp_path):
    cfg = LlamaConfig(**{**BASE, "moe": MoEConfig(n_experts=4, top_k=2, balance="quantile")})
    model = init(cfg, key=jax.random.PRNGKey(0))
    bad = {
        "moe.router": dataclasses.replace(cfg, moe=dataclasses.replace(cfg.moe, router="sigmoid")),
        "moe.n_shared_experts": dataclasses.replace(cfg, moe=dataclasses.replace(cfg.moe, n_shared_experts=1)),
        "moe.renormalize": dataclasses.replace(cfg, moe=dataclasses.replace(cfg.moe, renormalize=False)),
    }
    for field, c in bad.items():  # the config alone decides: no need for matching weights
        with pytest.raises(ValueError, match=field.replace(".", r"\.")):
            export_hf(dataclasses.replace(model, cfg=c), str(tmp_path / "x"))
    # quantile / aux-free balancing leaves a selection bias that changes routing: refused; a zero bias exports
    biased = eqx.tree_at(lambda m: m.blocks.moe.router_bias, model, model.blocks.moe.router_bias.at[1, 2].set(0.05))
    with pytest.raises(ValueError, match=r"moe\.router_bias .*quantile"):
        export_hf(biased, str(tmp_path / "x"))
    # MoE in only some layers is refused (by the config, and by the weights: dense MLP weights beside the experts)
    partial = dataclasses.replace(cfg, moe=dataclasses.replace(cfg.moe, every=2))
    with pytest.raises(ValueError, match=r"moe\.every=2.*only"):
        export_hf(dataclasses.replace(model, cfg=partial), str(tmp_path / "x"))
    from marin.models.layers import DenseMLP

    dense_too = DenseMLP(w_gate=jnp.zeros((2, 32, 48)), w_up=jnp.zeros((2, 32, 48)), w_down=jnp.zeros((2, 48, 32)))
    mixed = eqx.tree_at(lambda m: m.blocks.mlp, model, dense_too, is_leaf=lambda x: x is None)
    with pytest.raises(ValueError, match="only some layers"):
        export_hf(mixed, str(tmp_path / "x"))
    assert not (tmp_path / "x").exists()
    assert export_hf(model, str(tmp_path / "ok"))["architecture"] == "MixtralForCausalLM"
    qk = dataclasses.replace(model, cfg=dataclasses.replace(cfg, qk_norm=True))  # QK-norm: Qwen3-MoE, not Mixtral
    with pytest.raises(ValueError, match=r"Qwen3MoeForCausalLM: qk_norm=False"):
        from marin.models.hf import qwen3_moe_hf_tensors

        qwen3_moe_hf_tensors(model)
    assert not (tmp_path / "q").exists()
    with pytest.raises(ValueError, match="q_norm"):  # a QK-norm config, but weights without the norms
        export_hf(qk, str(tmp_path / "q"))
    # a Mixtral config.json without its expert counts
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text(
        json.dumps({"architectures": ["MixtralForCausalLM"], "hidden_size": 32})
    )
    with pytest.raises(ValueError, match="num_local_experts"):
        import_hf(str(tmp_path / "broken"))


@pytest.mark.parametrize("quantize", ["none", "int8"])
def test_engine_serves_a_mixtral_checkpoint_with_the_same_greedy_tokens_as_forward(tmp_path, quantize):
    from marin.serve.quantize import Int8Weight, quantize_model

    cfg = LlamaConfig(**{**BASE, "seq_len": 64, "moe": MoEConfig(n_experts=4, top_k=2, balance="switch")})
    export_hf(_random_model(cfg, 3), str(tmp_path / "m"), tokenizer=VOCAB)
    model, _ = import_hf(str(tmp_path / "m"))
    from marin.serve.server import inspect_model

    rep = inspect_model(str(tmp_path / "m"), quantize=quantize, max_batch=2)  # what `marin serve --dry-run` reports
    assert (
        rep["architecture"] == "MixtralForCausalLM" and rep["params"] == cfg.n_params - 2 * 4
    )  # the router bias is not stored
    served = quantize_model(model, quantize, group_size=16)
    if quantize != "none":
        assert isinstance(served.blocks.moe.expert_gate, Int8Weight) and isinstance(served.blocks.wq, Int8Weight)
        ref_model = jax.tree.map(
            lambda w: w.dequantize() if isinstance(w, Int8Weight) else w,
            served,
            is_leaf=lambda x: isinstance(x, Int8Weight),
        )
    else:
        ref_model = model
    prompts = [[3, 14, 15, 9, 26, 5], [40] * 13, [7, 8]]
    with Engine(served, max_batch=2) as eng:  # 3 prompts over 2 slots: one joins mid-way
        outs = eng.generate(prompts, SamplingParams(max_tokens=10, temperature=0.0))
    plain = jax.jit(forward)  # the plain forward, no cache (one compile)
    for p, c in zip(prompts, outs):
        seq = p + c.tokens
        window = np.zeros((1, cfg.seq_len), np.int32)
        window[0, : len(seq)] = seq  # causal: the padding after changes nothing
        logp = np.asarray(jax.nn.log_softmax(plain(ref_model, jnp.asarray(window))[0], -1))
        steps = range(len(p) - 1, len(seq) - 1)
        # greedy: every generated token is the plain forward's argmax given the tokens before it, so greedy
        # generation by full recompute produces exactly these tokens
        assert [int(logp[i].argmax()) for i in steps] == c.tokens, (p, c.tokens)
        np.testing.assert_allclose(c.logprobs, [float(logp[i, seq[i + 1]]) for i in steps], atol=1e-4)


def test_engine_serves_moe_in_only_some_layers_like_forward():
    """A marin MoE with dense and MoE layers (not a Mixtral; served from a training output) through the cache. Its int8
    weights through the same engine: the Qwen3-MoE variant of tests/test_serve_hf.py (a dense and an MoE layer too)."""
    cfg = LlamaConfig(
        **{**BASE, "seq_len": 32, "n_layers": 3, "moe": MoEConfig(n_experts=4, top_k=2, balance="switch", every=2)}
    )
    model = _random_model(cfg, 5)
    assert model.blocks.mlp.w_gate.shape[0] == 2 and model.blocks.moe.router.shape[0] == 1
    plain = jax.jit(forward)
    with Engine(model, max_batch=2) as eng:
        outs = eng.generate([[1, 2, 3, 4], [50] * 9], SamplingParams(max_tokens=6, temperature=0.0))
    for p, c in zip([[1, 2, 3, 4], [50] * 9], outs):
        seq = p + c.tokens
        window = np.zeros((1, cfg.seq_len), np.int32)
        window[0, : len(seq)] = seq
        logp = np.asarray(jax.nn.log_softmax(plain(model, jnp.asarray(window))[0], -1))
        steps = range(len(p) - 1, len(seq) - 1)
        assert [int(logp[i].argmax()) for i in steps] == c.tokens
        np.testing.assert_allclose(c.logprobs, [float(logp[i, seq[i + 1]]) for i in steps], atol=1e-4)


def test_transformers5_fused_qwen3_moe_imports_like_the_per_expert_save(tmp_path):
    "Qwen3-MoE's fused experts (save_original_format=False) import through Mixtral's unfusing to the same model."
    import inspect

    if "save_original_format" not in inspect.signature(transformers.PreTrainedModel.save_pretrained).parameters:
        pytest.skip(f"transformers {transformers.__version__} has no fused expert layout")
    from marin.serve.server import inspect_model

    hf = tiny_transformers_model(
        "Qwen3Moe", 2, head_dim=16, intermediate_size=40, moe_intermediate_size=24, num_experts=4, num_experts_per_tok=2
    )
    hf.save_pretrained(tmp_path / "fused", safe_serialization=True, save_original_format=False)
    hf.save_pretrained(tmp_path / "per-expert", safe_serialization=True)
    assert read_hf_tensors(str(tmp_path / "fused"))["model.layers.1.mlp.experts.gate_up_proj"].shape == (4, 48, 32)
    model, _ = import_hf(str(tmp_path / "fused"))
    legacy, _ = import_hf(str(tmp_path / "per-expert"))
    assert model.cfg == legacy.cfg and model.cfg.moe.moe_layer_ids(2) == (0, 1)
    assert all(bool((a == b).all()) for a, b in zip(jax.tree.leaves(model), jax.tree.leaves(legacy)))
    rep = inspect_model(str(tmp_path / "fused"))  # the dry run reads the fused names too
    assert rep["architecture"] == "Qwen3MoeForCausalLM"
    assert rep["params"] == inspect_model(str(tmp_path / "per-expert"))["params"]
