"""Hostile model files (issue #49), replayed by tests/replay.py: malformed or absurd `config.json` files, damaged
safetensors headers and shard indexes, broken tokenizers, damaged GGUF files, exports onto the wrong folder and a
download URL that never answers. Each case is a clear error naming the file and the field (or tensor, or key) or a
correct result; none builds what a file merely claims (a 10^9-layer config is refused in milliseconds, not allocated),
none hangs, none leaves a step RUNNING. Every input is a few KB: a two-layer model of width 32."""

import json, socket, struct
from pathlib import Path

import numpy as np
import pytest
from replay import Case, bytes_file, json_file

VOCAB, WIDTH, LAYERS = 300, 32, 2
IMPORT_SECONDS = 120  # an import that succeeds builds a (tiny) JAX model: the child's first one compiles
# a server that accepts connections (the kernel completes them) and never answers: one per process, made at import
_SILENT = socket.socket()
_SILENT.bind(("127.0.0.1", 0))
_SILENT.listen(16)
SILENT_URL = f"http://127.0.0.1:{_SILENT.getsockname()[1]}/model"


# ----------------------------------------------------------------------------------------------------- inputs
def _cfg():
    from marin.models.transformer import LlamaConfig

    return LlamaConfig(vocab_size=VOCAB, seq_len=64, d_model=WIDTH, n_layers=LAYERS, n_heads=4, n_kv_heads=2, d_ff=64)


def public_config(**change) -> dict:
    "A Llama `config.json` as published (no `marin_config`, so every field is read), with `change` applied."
    from marin.models.hf import dense_hf_config

    d = {k: v for k, v in dense_hf_config(_cfg()).items() if k != "marin_config"}
    return {**d, **change}


def tensors() -> dict[str, np.ndarray]:
    from marin.models.hf import dense_hf_shapes

    rng = np.random.default_rng(0)
    return {k: (0.02 * rng.standard_normal(s)).astype(np.float32) for k, s in dense_hf_shapes(_cfg()).items()}


_TOKENIZER: list[str] = []


def tokenizer_json(specials=("<|endoftext|>",)) -> str:
    "A byte-level BPE tokenizer of at most VOCAB tokens (what llama.cpp's gpt2 vocabulary holds)."
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB - 8,
        special_tokens=list(specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(["the cat sat on the mat, and the dog sat on the log 12345"] * 20, trainer)
    return tok.to_str()


def write_model(d: Path, name: str = "model", config: dict | bytes | None = None, specials=("<|endoftext|>",)) -> Path:
    "A complete tiny Hugging Face folder `d/name` (config, one safetensors file, tokenizer); `config` replaces its config."
    from marin.models.hf import safetensors_bytes

    folder = d / name
    bytes_file(folder / "model.safetensors", safetensors_bytes(tensors()))
    c = public_config() if config is None else config
    bytes_file(folder / "config.json", c if isinstance(c, bytes) else json.dumps(c).encode())
    bytes_file(folder / "tokenizer.json", tokenizer_json(specials).encode())
    json_file(folder / "tokenizer_config.json", {"eos_token": specials[0], "bos_token": specials[0]})
    return folder


def _config_case(name: str, change: dict, *says: str, argv=None) -> Case:
    return Case(
        f"hf-config/{name}",
        argv=argv or ("import", "{d}/model"),
        make=_Make(config=public_config(**change)),
        code=2,
        says=("config.json", *says),
        seconds=IMPORT_SECONDS,
    )


class _Make:
    "A module-level callable writing a tiny model folder with a given config (the child imports this file)."

    def __init__(self, config=None, then=None):
        self.config, self.then = config, then

    def __call__(self, d: Path) -> None:
        folder = write_model(d, config=self.config)
        if self.then is not None:
            self.then(folder)


def st_file(header, data: bytes = b"", length: int | None = None) -> bytes:
    "A safetensors file of this header (a dict, or raw bytes) and data; `length` overrides the header's length field."
    h = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(h) if length is None else length) + h + data


def _replace_weights(data: bytes):
    return lambda folder: bytes_file(folder / "model.safetensors", data)


def _index(weight_map) -> callable:
    def then(folder: Path) -> None:
        (folder / "model.safetensors").rename(folder / "model-00001-of-00001.safetensors")
        json_file(folder / "model.safetensors.index.json", {"metadata": {}, "weight_map": weight_map})

    return then


def _good_index(folder: Path) -> None:
    names = list(tensors())
    _index({n: "model-00001-of-00001.safetensors" for n in names})(folder)


def _index_beside_single(folder: Path) -> None:
    "A sharded export's index and shard left beside a newer single-file checkpoint."
    names = list(tensors())
    bytes_file(folder / "model-00001-of-00001.safetensors", (folder / "model.safetensors").read_bytes())
    json_file(
        folder / "model.safetensors.index.json", {"weight_map": {n: "model-00001-of-00001.safetensors" for n in names}}
    )


def _write_text(name: str, text: str):
    return lambda folder: (folder / name).write_text(text)


def _marin_config(value):
    "A config.json as marin writes it (with `marin_config`), that field replaced by `value(marin_config)`."

    def then(folder: Path) -> None:
        from marin.models.hf import dense_hf_config

        full = dense_hf_config(_cfg())
        json_file(folder / "config.json", dict(full, marin_config=value(full["marin_config"])))

    return then


def _int_weight(folder: Path) -> None:
    from marin.models.hf import safetensors_bytes

    t = tensors()
    t["model.norm.weight"] = np.ones(WIDTH, np.int64)
    bytes_file(folder / "model.safetensors", safetensors_bytes(t))


def _truncate_weights(folder: Path) -> None:
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])


# ----------------------------------------------------------------------------------------------------- GGUF
def write_gguf_file(d: Path, pre: str = "gpt2", specials=("<|endoftext|>",)) -> Path:
    "A valid tiny llama GGUF file `d/m.gguf` with a byte-level vocabulary (`tokenizer.ggml.pre = pre`)."
    from marin.models.gguf import write_gguf

    folder = write_model(d, "src", specials=specials)
    return Path(write_gguf(str(folder), str(d / "m.gguf"), "F32", tokenizer_pre=pre))


def _patched_gguf(patch):
    "make(d): a valid GGUF file, then `patch(bytes) -> bytes` applied to it."

    def make(d: Path) -> None:
        p = write_gguf_file(d)
        p.write_bytes(patch(p.read_bytes()))

    return make


def _at(data: bytes, offset: int, fmt: str, value) -> bytes:
    b = bytearray(data)
    struct.pack_into("<" + fmt, b, offset, value)
    return bytes(b)


def _key_value(key: str) -> callable:
    "Offset of the uint32 value of GGUF key `key` (after its name and its type)."
    return lambda data: data.index(key.encode()) + len(key) + 4


def _tensor_field(name: str, field: int) -> callable:
    "Offset in a 2-D tensor's info: 0 ne0, 8 ne1, 16 type, 20 offset (after its name and rank)."
    return lambda data: data.index(name.encode()) + len(name) + 4 + field


GGUF_PATCHES = {  # name -> (patch, what the error must say)
    "truncated-data": (lambda b: b[: len(b) // 2], ("truncated",)),
    "truncated-header": (lambda b: b[:300], ("truncated",)),
    "empty": (lambda b: b"", ("not a GGUF file",)),
    "magic-only": (lambda b: b[:4], ("too short",)),
    "bad-magic": (lambda b: b"GGML" + b[4:], ("not a GGUF file",)),
    "version-7": (lambda b: _at(b, 4, "I", 7), ("GGUF version 7",)),
    "version-1": (lambda b: _at(b, 4, "I", 1), ("GGUF version 1",)),
    "tensor-count-2e60": (lambda b: _at(b, 8, "Q", 2**60), ("tensors", "more than")),
    "key-count-2e60": (lambda b: _at(b, 16, "Q", 2**60), ("keys", "more than")),
    "key-name-length-2e40": (lambda b: _at(b, 24, "Q", 2**40), ("key #0's name", "more than")),
    "value-type-99": (lambda b: _at(b, 24 + 8 + len("general.architecture"), "I", 99), ("unknown value type 99",)),
    "block-count-1e9": (
        lambda b: _at(b, _key_value("llama.block_count")(b), "I", 10**9),
        ("llama.block_count=1000000000",),
    ),
    "block-count-3": (
        lambda b: _at(b, _key_value("llama.block_count")(b), "I", 3),
        ("llama.block_count=3", "blocks 0..1"),
    ),
    "context-4e9": (lambda b: _at(b, _key_value("llama.context_length")(b), "I", 4 * 10**9), ("llama.context_length",)),
    "embedding-length-1e9": (
        lambda b: _at(b, _key_value("llama.embedding_length")(b), "I", 10**9),
        ("llama.embedding_length",),
    ),
    "heads-0": (lambda b: _at(b, _key_value("llama.attention.head_count")(b), "I", 0), ("llama.attention.head_count",)),
    "q-shape-wrong": (
        lambda b: _at(b, _tensor_field("blk.0.attn_q.weight", 8)(b), "Q", 64),
        ("'blk.0.attn_q.weight'",),
    ),
    "tensor-offset-past-end": (
        lambda b: _at(b, _tensor_field("blk.0.attn_q.weight", 20)(b), "Q", 2**40),
        ("'blk.0.attn_q.weight'", "past the end"),
    ),
    "tensor-type-99": (
        lambda b: _at(b, _tensor_field("blk.0.attn_q.weight", 16)(b), "I", 99),
        ("'blk.0.attn_q.weight'", "unknown type 99"),
    ),
    "tensor-dims-2e40": (
        lambda b: _at(b, _tensor_field("blk.0.attn_q.weight", 8)(b), "Q", 2**40),
        ("'blk.0.attn_q.weight'",),
    ),
    "bos-id-out-of-range": (
        lambda b: _at(b, _key_value("tokenizer.ggml.bos_token_id")(b), "I", 10**6),
        ("tokenizer.ggml.bos_token_id",),
    ),
}


def _gguf_cases() -> list[Case]:
    return [
        Case(f"gguf/{name}", argv=("import", "{d}/m.gguf"), make=_patched_gguf(patch), code=2, says=("m.gguf", *says))
        for name, (patch, says) in GGUF_PATCHES.items()
    ]


def make_gguf_unknown_pre(d: Path) -> None:
    write_gguf_file(d, pre="no-such-pre")


def make_gguf_smollm_pre(d: Path) -> None:
    write_gguf_file(d, pre="smollm", specials=("<|endoftext|>", "<|im_start|>", "<|im_end|>"))


def check_import_attached_chatml(d: Path, output: str) -> None:
    "The import of a ChatML vocabulary without a template carries ChatML's template, where serve reads it."
    (tc,) = list((d / "store").rglob("tokenizer_config.json"))
    assert "<|im_start|>" in json.loads(tc.read_text())["chat_template"]


# ----------------------------------------------------------------------------------------------------- export
def make_export_nonempty(d: Path) -> None:
    write_model(d)
    bytes_file(d / "out" / "notes.txt", b"someone else's files")


def make_export_onto_file(d: Path) -> None:
    write_model(d)
    bytes_file(d / "out", b"a file, not a folder")


def make_export_over_sharded(d: Path) -> None:
    "A folder that holds an older sharded export: its index and shards must not survive beside the new file."
    write_model(d)
    out = d / "out"
    bytes_file(out / "model-00001-of-00002.safetensors", b"old")
    bytes_file(out / "model-00002-of-00002.safetensors", b"old")
    json_file(
        out / "model.safetensors.index.json", {"weight_map": {"model.norm.weight": "model-00001-of-00002.safetensors"}}
    )
    json_file(out / "config.json", {"old": True})


def check_one_export(d: Path, output: str) -> None:
    from marin.models.hf import read_hf_config

    held = sorted(p.name for p in (d / "out").iterdir())
    assert "model.safetensors.index.json" not in held and not [h for h in held if h.startswith("model-0")], held
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(held), held
    assert not [p for p in d.iterdir() if ".partial-" in p.name or ".replaced-" in p.name]
    read_hf_config(str(d / "out"))  # one consistent checkpoint: config, headers and weights agree


def check_untouched(d: Path, output: str) -> None:
    assert (d / "out" / "notes.txt").read_bytes() == b"someone else's files"


# ----------------------------------------------------------------------------------------------------- cases
CASES = [
    # config.json: absurd numbers in every field, refused by name before anything is sized from them
    _config_case("num_hidden_layers-1e9", {"num_hidden_layers": 10**9}, "num_hidden_layers", "1000000000"),
    _config_case("num_hidden_layers-1e9-float", {"num_hidden_layers": 1e9}, "num_hidden_layers", "whole number"),
    _config_case("num_hidden_layers-0", {"num_hidden_layers": 0}, "num_hidden_layers"),
    _config_case("num_hidden_layers-3-vs-2-held", {"num_hidden_layers": 3}, "num_hidden_layers=3", "layers 0..1"),
    _config_case("max_position_embeddings-1e15", {"max_position_embeddings": 10**15}, "max_position_embeddings"),
    _config_case("vocab_size-1e9", {"vocab_size": 10**9}, "vocab_size"),
    _config_case("vocab_size-vs-embedding", {"vocab_size": VOCAB + 1}, "vocab_size", "embed_tokens"),
    _config_case("hidden_size-1e9", {"hidden_size": 10**9}, "hidden_size"),
    _config_case("hidden_size-string", {"hidden_size": "32"}, "hidden_size", "whole number"),
    _config_case("intermediate_size-1e12", {"intermediate_size": 10**12}, "intermediate_size"),
    _config_case("intermediate_size-vs-weights", {"intermediate_size": 96}, "mlp.gate_proj.weight"),
    _config_case("num_attention_heads-1e9", {"num_attention_heads": 10**9}, "num_attention_heads"),
    _config_case("num_key_value_heads-0", {"num_key_value_heads": 0}, "num_key_value_heads"),
    _config_case("head_dim-negative", {"head_dim": -8}, "head_dim"),
    _config_case("rms_norm_eps-nan", {"rms_norm_eps": float("nan")}, "rms_norm_eps", "finite"),
    _config_case("rms_norm_eps-negative", {"rms_norm_eps": -1e-5}, "rms_norm_eps"),
    _config_case("rope_theta-inf", {"rope_theta": float("inf")}, "rope_theta"),
    _config_case(
        "rope_factor-nan",
        {"rope_parameters": {"rope_type": "linear", "rope_theta": 1e4, "factor": float("nan")}},
        "rope_parameters.factor",
    ),
    _config_case("initializer_range-nan", {"initializer_range": float("nan")}, "initializer_range"),
    _config_case("sliding_window-1e12", {"sliding_window": 10**12}, "sliding_window"),
    _config_case(
        "tie_word_embeddings-string", {"tie_word_embeddings": "false"}, "tie_word_embeddings", "true or false"
    ),
    _config_case("vocab_size-null", {"vocab_size": None}, "lacks vocab_size"),
    _config_case("architectures-string", {"architectures": "LlamaForCausalLM"}, "architectures"),
    _config_case("architectures-unknown", {"architectures": ["GPT2LMHeadModel"]}, "GPT2LMHeadModel"),
    Case(
        "hf-config/not-json",
        argv=("import", "{d}/model"),
        make=_Make(config=b'{"vocab_size": 3'),
        code=2,
        says=("config.json", "not valid JSON"),
    ),  # fmt: skip
    Case(
        "hf-config/a-list",
        argv=("import", "{d}/model"),
        make=_Make(config=b"[1, 2]"),
        code=2,
        says=("config.json", "not a JSON object"),
    ),  # fmt: skip
    Case(
        "hf-config/empty",
        argv=("import", "{d}/model"),
        make=_Make(config=b""),
        code=2,
        says=("config.json", "not valid JSON"),
    ),
    Case(
        "hf-config/binary",
        argv=("import", "{d}/model"),
        make=_Make(config=b"\xff\xfe\x00garbage"),
        code=2,
        says=("config.json",),
    ),  # fmt: skip
    Case(
        "hf-config/marin_config-n_layers-1e9",
        argv=("import", "{d}/model"),
        code=2,
        seconds=IMPORT_SECONDS,
        make=_Make(then=_marin_config(lambda m: dict(m, n_layers=10**9))),
        says=("marin_config.n_layers=1000000000",),
    ),  # fmt: skip
    Case(
        "hf-config/marin_config-a-list",
        argv=("import", "{d}/model"),
        code=2,
        seconds=IMPORT_SECONDS,
        make=_Make(then=_marin_config(lambda m: [1, 2])),
        says=("config.json", "marin_config"),
    ),  # fmt: skip
    # the same absurd configs through serve --dry-run: refused, not a MemoryError
    _config_case(
        "dry-run/num_hidden_layers-1e9",
        {"num_hidden_layers": 10**9},
        "num_hidden_layers",
        argv=("serve", "--model", "{d}/model", "--dry-run"),
    ),  # fmt: skip
    _config_case(
        "dry-run/max_position_embeddings-1e15",
        {"max_position_embeddings": 10**15},
        "max_position_embeddings",
        argv=("serve", "--model", "{d}/model", "--dry-run"),
    ),  # fmt: skip
    _config_case(
        "dry-run/rms_norm_eps-nan",
        {"rms_norm_eps": float("nan")},
        "rms_norm_eps",
        argv=("serve", "--model", "{d}/model", "--dry-run"),
    ),  # fmt: skip
    # safetensors: headers checked against the file, float dtypes only
    Case(
        "safetensors/int64-weight",
        argv=("import", "{d}/model"),
        make=_Make(then=_int_weight),
        code=2,
        says=("model.safetensors", "model.norm.weight", "I64"),
    ),  # fmt: skip
    Case(
        "safetensors/unknown-dtype",
        argv=("import", "{d}/model"),
        code=2,
        says=("model.safetensors", "F99"),
        make=_Make(
            then=_replace_weights(st_file({"w": {"dtype": "F99", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8))
        ),
    ),  # fmt: skip
    Case(
        "safetensors/header-length-1e15",
        argv=("import", "{d}/model"),
        code=2,
        says=("model.safetensors", "header claims"),
        make=_Make(then=_replace_weights(st_file({}, length=10**15))),
    ),  # fmt: skip
    Case(
        "safetensors/header-not-json",
        argv=("import", "{d}/model"),
        code=2,
        says=("model.safetensors", "not JSON"),
        make=_Make(then=_replace_weights(st_file(b"{nope"))),
    ),  # fmt: skip
    Case(
        "safetensors/offsets-past-end",
        argv=("import", "{d}/model"),
        code=2,
        says=("model.safetensors", "data_offsets"),
        make=_Make(
            then=_replace_weights(st_file({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 8))
        ),
    ),  # fmt: skip
    Case(
        "safetensors/shape-1e9-squared",
        argv=("import", "{d}/model"),
        code=2,
        says=("model.safetensors", "'w'"),
        make=_Make(
            then=_replace_weights(
                st_file({"w": {"dtype": "F32", "shape": [10**9, 10**9], "data_offsets": [0, 8]}}, b"\0" * 8)
            )
        ),
    ),  # fmt: skip
    Case(
        "safetensors/three-bytes",
        argv=("import", "{d}/model"),
        code=2,
        says=("model.safetensors", "too short"),
        make=_Make(then=_replace_weights(b"abc")),
    ),  # fmt: skip
    Case(
        "safetensors/truncated",
        argv=("import", "{d}/model"),
        code=2,
        says=("model.safetensors",),
        make=_Make(then=_truncate_weights),
    ),  # fmt: skip
    # shard indexes: only the folder's own shards, and never beside a single-file checkpoint
    Case(
        "index/traversal",
        argv=("import", "{d}/model"),
        code=2,
        says=("model.safetensors.index.json", "../../etc/passwd"),
        make=_Make(then=_index({"model.norm.weight": "../../etc/passwd"})),
    ),  # fmt: skip
    Case(
        "index/absolute",
        argv=("import", "{d}/model"),
        code=2,
        says=("model.safetensors.index.json", "/etc/passwd"),
        make=_Make(then=_index({"model.norm.weight": "/etc/passwd"})),
    ),  # fmt: skip
    Case(
        "index/not-json",
        argv=("import", "{d}/model"),
        code=2,
        says=("model.safetensors.index.json", "not a JSON"),
        make=_Make(then=lambda f: (_good_index(f), _write_text("model.safetensors.index.json", "{")(f))),
    ),  # fmt: skip
    Case(
        "index/no-weight-map",
        argv=("import", "{d}/model"),
        code=2,
        says=("model.safetensors.index.json", "weight_map"),
        make=_Make(
            then=lambda f: (_good_index(f), _write_text("model.safetensors.index.json", '{"weight_map": []}')(f))
        ),
    ),  # fmt: skip
    Case(
        "index/beside-single-file",
        argv=("import", "{d}/model"),
        code=2,
        says=("model.safetensors.index.json", "both"),
        make=_Make(then=_index_beside_single),
    ),  # fmt: skip
    Case(
        "index/beside-single-file-dry-run",
        argv=("serve", "--model", "{d}/model", "--dry-run"),
        code=2,
        says=("model.safetensors.index.json", "both"),
        make=_Make(then=_index_beside_single),
        seconds=IMPORT_SECONDS,
    ),  # fmt: skip
    Case(
        "index/good-shards",
        argv=("import", "{d}/model"),
        expect="ok",
        make=_Make(then=_good_index),
        seconds=IMPORT_SECONDS,
    ),
    # tokenizers: a broken one is refused by import (it used to be copied, then reported missing)
    Case(
        "tokenizer/truncated-json",
        argv=("import", "{d}/model"),
        code=2,
        says=("tokenizer.json", "not valid JSON"),
        make=_Make(then=_write_text("tokenizer.json", '{"model": {"type": "BPE", "vocab": {')),
    ),  # fmt: skip
    Case(
        "tokenizer/not-a-tokenizer",
        argv=("import", "{d}/model"),
        code=2,
        says=("tokenizer.json", "tokenizers"),
        make=_Make(then=_write_text("tokenizer.json", '{"model": {"type": "NoSuchModel"}}')),
    ),  # fmt: skip
    Case(
        "tokenizer/no-model",
        argv=("import", "{d}/model"),
        code=2,
        says=("tokenizer.json", "not a tokenizer file"),
        make=_Make(then=_write_text("tokenizer.json", "[]")),
    ),  # fmt: skip
    Case(
        "tokenizer/config-not-json",
        argv=("import", "{d}/model"),
        code=2,
        says=("tokenizer_config.json", "not valid JSON"),
        make=_Make(then=_write_text("tokenizer_config.json", "{,}")),
    ),  # fmt: skip
    Case(
        "tokenizer/broken-dry-run",
        argv=("serve", "--model", "{d}/model", "--dry-run"),
        code=2,
        seconds=IMPORT_SECONDS,
        says=("tokenizer.json",),
        make=_Make(then=_write_text("tokenizer.json", '{"model": ')),
    ),  # fmt: skip
    # GGUF files: damaged headers, absurd counts, metadata its tensors contradict, tensors past the end
    *_gguf_cases(),
    Case(
        "gguf/unknown-pre-tokenizer",
        argv=("import", "{d}/m.gguf"),
        make=make_gguf_unknown_pre,
        code=(1, 2),
        says=("no-such-pre", "not a pre-tokenizer llama.cpp knows"),
        seconds=IMPORT_SECONDS,
    ),  # fmt: skip
    Case(
        "gguf/smollm-pre-tokenizer-chatml-attached",
        argv=("import", "{d}/m.gguf"),
        make=make_gguf_smollm_pre,
        expect="ok",
        says=("chatml",),
        check=check_import_attached_chatml,
        seconds=IMPORT_SECONDS,
    ),  # fmt: skip
    # export: never onto a file, the source, or someone's files; --overwrite leaves exactly one checkpoint
    Case(
        "export/non-empty-folder",
        argv=("export", "--checkpoint", "{d}/model", "--output", "{d}/out"),
        make=make_export_nonempty,
        code=2,
        says=("out", "not empty", "--overwrite"),
        check=check_untouched,
        seconds=IMPORT_SECONDS,
    ),  # fmt: skip
    Case(
        "export/onto-a-file",
        argv=("export", "--checkpoint", "{d}/model", "--output", "{d}/out", "--overwrite"),
        make=make_export_onto_file,
        code=2,
        says=("out", "is a file"),
        seconds=IMPORT_SECONDS,
    ),  # fmt: skip
    Case(
        "export/onto-its-source",
        argv=("export", "--checkpoint", "{d}/model", "--output", "{d}/model", "--overwrite"),
        make=_Make(),
        code=2,
        says=("model", "destroy"),
        seconds=IMPORT_SECONDS,
    ),  # fmt: skip
    Case(
        "export/inside-its-source",
        argv=("export", "--checkpoint", "{d}/model", "--output", "{d}/model/sub"),
        make=_Make(),
        code=2,
        says=("model/sub", "destroy"),
        seconds=IMPORT_SECONDS,
    ),  # fmt: skip
    Case(
        "export/over-a-sharded-export",
        argv=("export", "--checkpoint", "{d}/model", "--output", "{d}/out", "--overwrite"),
        make=make_export_over_sharded,
        expect="ok",
        check=check_one_export,
        seconds=IMPORT_SECONDS,
    ),  # fmt: skip
    # download: a URL that never answers is named after MARIN_DOWNLOAD_TIMEOUT, not five minutes later
    Case(
        "download/stalled-url",
        argv=("download", "--model", SILENT_URL, "--output", "{d}/dl"),
        code=2,
        env={"MARIN_DOWNLOAD_TIMEOUT": "1"},
        says=("http://127.0.0.1:", "/model: no answer within 1 s"),
        seconds=30,
    ),  # fmt: skip
    Case(
        "download/timeout-nan",
        argv=("download", "--model", SILENT_URL, "--output", "{d}/dl"),
        code=2,
        env={"MARIN_DOWNLOAD_TIMEOUT": "nan"},
        says=("MARIN_DOWNLOAD_TIMEOUT",),
        seconds=30,
    ),  # fmt: skip
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_replay(case, replayed):
    replayed.check(case)
