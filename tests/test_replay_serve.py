"""Hostile `marin serve` command lines (issue #49), replayed by tests/replay.py: absurd numbers in every serve flag
(inf, nan, 1e20, negative, 0), a missing or garbage model path, bad chat templates, an empty API key, and the same
input given to `serve` and to `serve --dry-run` (which must agree: one validation path). Each case is a clear error
naming the flag or the file, or a correct dry run; none loads a model for long, binds a port it keeps, or allocates
what a flag merely asks for (`--max-batch 1e20` is refused by the memory check, not attempted). The model is a few
KB: a two-layer Llama of width 32 with a character tokenizer, written with numpy (no JAX model is built to make it).
The HTTP side (auth, Host, unsupported fields, NaN and surrogates in requests) is tests/test_serve_hostile.py."""

from pathlib import Path

import numpy as np
import pytest
from replay import Case, bytes_file, json_file

VOCAB = ["\n"] + [chr(c) for c in range(32, 127)]  # 96 characters
CONTEXT = 64


def _cfg():
    from marin.models.transformer import LlamaConfig

    return LlamaConfig(vocab_size=len(VOCAB), seq_len=CONTEXT, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64)


def model(d: Path, name: str = "model", tokenizer: bool = True, **change) -> Path:
    "A tiny Hugging Face folder `d/name` (config.json as published, with `change`), its weights and tokenizer."
    from marin.models.hf import dense_hf_config, dense_hf_shapes, safetensors_bytes
    from marin.serve.hf import char_level_tokenizer_json

    out = d / name
    cfg = {k: v for k, v in dense_hf_config(_cfg()).items() if k != "marin_config"}
    json_file(out / "config.json", {**cfg, **change})
    rng = np.random.default_rng(0)
    weights = {k: (0.02 * rng.standard_normal(s)).astype(np.float32) for k, s in dense_hf_shapes(_cfg()).items()}
    bytes_file(out / "model.safetensors", safetensors_bytes(weights))
    if tokenizer:
        bytes_file(out / "tokenizer.json", char_level_tokenizer_json(VOCAB).encode())
    return out


def gguf(d: Path) -> None:
    "d/model.gguf, written from a tiny folder without a tokenizer (a character vocabulary has no GGUF form)."
    from marin.models.gguf import write_gguf

    write_gguf(str(model(d, "src", tokenizer=False)), str(d / "model.gguf"), "Q8_0")


def huge_context(d: Path) -> None:
    model(d, max_position_embeddings=10**15)


def broken_template(d: Path) -> None:
    model(d)
    bytes_file(d / "broken.jinja", b"{% for m in messages %}{{ m.content }")


def binary_template(d: Path) -> None:
    model(d)
    bytes_file(d / "bin.jinja", b"\xff\xfe\x00{{ messages }}")


def big_template(d: Path) -> None:
    model(d)
    bytes_file(d / "big.jinja", b"{{ x }}" * 300_000)  # 2.1 MB: no chat template is


def good_template(d: Path) -> None:
    model(d)
    bytes_file(d / "chat.jinja", b"{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}")


def own_broken_template(d: Path) -> None:
    out = model(d)
    json_file(out / "tokenizer_config.json", {"chat_template": "{% if messages %}never closed"})


def garbage_gguf(d: Path) -> None:
    bytes_file(d / "model.gguf", b"GGUF" + bytes(range(256)) * 4)


def not_gguf(d: Path) -> None:
    bytes_file(d / "model.gguf", b"PK\x03\x04 this is a zip file, not a model")


def garbage_config(d: Path) -> None:
    out = model(d)
    bytes_file(out / "config.json", b"\x00\x01 not json {")


def empty_folder(d: Path) -> None:
    (d / "model").mkdir(parents=True)


def no_weights(d: Path) -> None:
    (model(d) / "model.safetensors").unlink()


def text_file(d: Path) -> None:
    bytes_file(d / "model", b"just some text\n")


# ------------------------------------------------------------------------------------------------------ cases
SERVE = ("serve", "--model", "{d}/model")
DRY = (*SERVE, "--dry-run")

# flag -> [(value, what the error says)]: each value refused by name, by serve and by its dry run alike
FLAGS = {
    "--max-seq-len": [
        ("inf", "'--max-seq-len'"),
        ("nan", "'--max-seq-len'"),
        ("1e20", "'--max-seq-len'"),
        ("-1", "--max-seq-len -1: must be at least 0"),
        ("65", "--max-seq-len 65: must be in 1..64"),
        ("100000000000000000000", "the model's context (config.json max_position_embeddings)"),
    ],
    "--max-batch": [
        ("inf", "'--max-batch'"),
        ("0", "--max-batch 0: must be at least 1"),
        ("-3", "--max-batch -3: must be at least 1"),
        ("100000000000000000000", "lower --max-seq-len or --max-batch"),
    ],
    "--prefill-chunk": [("0", "--prefill-chunk 0: must be at least 1"), ("nan", "'--prefill-chunk'")],
    "--max-choices": [("0", "--max-choices 0: must be at least 1"), ("1e20", "'--max-choices'")],
    "--max-concurrent": [("-1", "--max-concurrent -1: must be at least 1")],
    "--max-prompt-chars": [("-1", "--max-prompt-chars -1: must be at least 0")],
    "--max-body-mb": [
        ("inf", "--max-body-mb inf: must be in (0, 4096]"),
        ("nan", "--max-body-mb nan: must be in (0, 4096]"),
        ("1e20", "--max-body-mb 1e+20: must be in (0, 4096]"),
        ("-1", "--max-body-mb -1.0: must be in (0, 4096]"),
        ("0", "--max-body-mb 0.0: must be in (0, 4096]"),
    ],
    "--group-size": [("1", "--group-size 1: must be at least 2"), ("inf", "'--group-size'")],
    "--quantize": [("int3", "--quantize int3")],
    "--quantize-head": [("float7", "--quantize-head float7")],
    "--api-key": [("", "--api-key '': empty"), ("sk key", "--api-key: must be printable ASCII")],
    "--chat-template": [
        ("{d}/nope.jinja", "nope.jinja: no such file, and not a family"),
        ("vicuna", "not a family the lab knows (gemma3, llama3, chatml)"),
        ("{d}", ": a folder; give the template's .jinja file"),
        ("/dev/zero", "/dev/zero: not a regular file"),
    ],
}
MODES = (("dry", ("--dry-run",)), ("live", ("--port", "0")))  # live: serve for real; each case is refused first


def _label(v: str) -> str:
    return v.replace("{d}", "d").replace("/", "_") or "empty"


CASES = [
    Case(f"flag{flag}/{_label(v)}/{mode}", argv=(*SERVE, *extra, flag, v), make=model, code=2, says=(says,))
    for flag, values in FLAGS.items()
    for v, says in values
    for mode, extra in MODES
]
CASES += [
    Case("flag--port/99999", argv=(*SERVE, "--port", "99999"), make=model, code=2, says=("--port 99999: must be in",)),
    Case("flag--port/-1", argv=(*SERVE, "--port", "-1"), make=model, code=2, says=("--port -1",)),
    Case("flag--port/1e20", argv=(*SERVE, "--port", "1e20"), make=model, code=2, says=("'--port'",)),
]
# the same model or template, dry run and serve alike: refused naming the file and the field
INPUTS = [
    ("missing", None, (), ("--model", "model", "marin export")),
    ("empty-folder", empty_folder, (), ("--model", "model", "marin download")),
    ("a-text-file", text_file, (), ("--model", "model", "not a training output")),
    ("garbage-config", garbage_config, (), ("config.json", "not valid JSON")),
    ("no-weights", no_weights, (), ("model.safetensors",)),
    ("context-1e15", huge_context, (), ("config.json", "max_position_embeddings", "1000000000000000")),
    ("own-template-broken", own_broken_template, (), ("tokenizer_config.json: not a Jinja chat template",)),
    (
        "template-syntax",
        broken_template,
        ("--chat-template", "{d}/broken.jinja"),
        ("broken.jinja: not a Jinja", "line 1"),
    ),
    ("template-binary", binary_template, ("--chat-template", "{d}/bin.jinja"), ("bin.jinja: not UTF-8",)),
    ("template-2mb", big_template, ("--chat-template", "{d}/big.jinja"), ("big.jinja: 2,100,000 bytes, not a chat",)),
]
CASES += [
    Case(f"model/{name}/{mode}", argv=(*SERVE, *extra, *more), make=make, code=2, says=says)
    for name, make, more, says in INPUTS
    for mode, extra in MODES
]
CASES += [
    Case(f"gguf/{name}/{mode}", argv=("serve", "--model", "{d}/model.gguf", *extra), make=make, code=2, says=says)
    for name, make, says in (
        ("missing", None, ("model.gguf", "no such GGUF file")),
        ("garbage", garbage_gguf, ("model.gguf",)),
        ("not-gguf", not_gguf, ("model.gguf", "GGUF")),
    )
    for mode, extra in MODES
]
CASES += [  # correct dry runs: what serving reserves, stated; the same flags serve takes
    Case("ok/dry-run", argv=DRY, make=model, expect="ok",
         says=("KV cache 0.12 MiB (131,072 bytes: --max-batch 8 x --max-seq-len 64 tokens", "chat template: NONE")),
    Case("ok/max-seq-len-16-max-batch-2", argv=(*DRY, "--max-seq-len", "16", "--max-batch", "2"), make=model,
         expect="ok", says=("(8,192 bytes: --max-batch 2 x --max-seq-len 16 tokens, of the model's 64)",)),
    Case("ok/chat-template-file", argv=(*DRY, "--chat-template", "{d}/chat.jinja"), make=good_template, expect="ok",
         says=("chat template: ", "chat.jinja")),
    Case("ok/chat-template-family", argv=(*DRY, "--chat-template", "gemma3", "--quantize", "int8"), make=model,
         expect="ok", says=("chat template: the lab's gemma3 template", "(int8, head int8;")),
    Case("ok/gguf", argv=("serve", "--model", "{d}/model.gguf", "--dry-run", "--max-seq-len", "32"), make=gguf,
         expect="ok", says=("LlamaForCausalLM", "24,736 parameters", "--max-seq-len 32 tokens")),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_replay(case, replayed):
    replayed.check(case)


def test_dry_run_and_serve_agree(replayed):
    "Every input refused by `serve` is refused by `serve --dry-run` with the same message (its folder aside)."
    said = lambda name: replayed.results[name]["output"].replace(str(replayed.folders[name]), "{d}").splitlines()[-1:]
    pairs = [(c.name, c.name.removesuffix("/dry") + "/live") for c in CASES if c.name.endswith("/dry")]
    assert len(pairs) > 40
    for dry, live in pairs:
        assert replayed.results[dry]["code"] == replayed.results[live]["code"] == 2, (dry, live)
        assert said(dry) == said(live), (said(dry), said(live))
