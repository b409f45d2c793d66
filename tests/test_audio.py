"The audio–text path end to end: prose -> espeak-ng utterances -> token shards -> mixture -> trainer, metrics per type."

import json, os, shutil

import numpy as np
import pytest

os.environ.setdefault("WANDB_MODE", "offline")

PROSE = (
    "It was a bright cold day in the spring. The old mill stood by the river. She walked along the bank alone. "
    "A small boat drifted past the reeds. The miller waved from his door. Evening came slowly over the hills. "
    "They sat down to supper at last. Nobody spoke of the letter again."
)


@pytest.fixture(scope="module")
def spoken(tmp_path_factory):
    "One store in which espeak-ng has spoken PROSE's eight sentences (a cached step): (executor, the speech step)."
    if shutil.which("espeak-ng") is None:
        pytest.fail("espeak-ng is not installed: `make espeak` (or `apt-get install -y espeak-ng`) installs it")
    from marin.core.executor import Executor
    from marin.data.sources import SourceConfig, import_step
    from marin.data.speech import SpeechConfig, speech_step

    d = tmp_path_factory.mktemp("audio")
    (d / "prose.txt").write_text(PROSE)
    ex = Executor(str(d / "store"), verbose=False)
    prose = import_step(SourceConfig("prose", (str(d / "prose.txt"),), format="text"))
    speech = speech_step(SpeechConfig(prose, max_utterances=8), "speech_test")
    ex.run([speech])
    return ex, speech


def test_espeak_utterances_train_with_metrics_per_segment_type(spoken):
    "espeak-ng speaks eight sentences; they tokenize as text + audio and train two steps with typed metrics."
    from marin.data.sources import read_documents
    from marin.data.shards import TokenizeConfig, tokenize_step, TokenSet
    from marin.data.mixture import MixtureConfig, MixtureComponent, MixtureLoader
    from marin.data.sample import AudioSample, mulaw_decode
    from marin.models.transformer import LlamaConfig
    from marin.train.trainer import SUMMARY_FILE, TrainConfig, train_step
    from marin.train.optim import OptimizerConfig
    from marin.train.checkpoint import CheckpointConfig

    ex, speech = spoken
    spec = "audio:max_audio=96"
    with_text = tokenize_step(TokenizeConfig(speech, spec), "tokens/speech_text")
    no_text = tokenize_step(TokenizeConfig(speech, "audio:no_transcript:max_audio=96"), "tokens/speech_audio")
    mix = MixtureConfig(
        (MixtureComponent("with_text", with_text), MixtureComponent("audio_only", no_text)),
        seq_len=128,
        batch_size=4,
        block_rows=4,
        sample="audio",
    )
    held = MixtureConfig((MixtureComponent("held", with_text),), seq_len=128, batch_size=4, sample="audio")
    cfg = TrainConfig(
        model=LlamaConfig(vocab_size=516, seq_len=128, d_model=32, n_layers=1, n_heads=2, n_kv_heads=2, d_ff=64),
        data=mix,
        eval_data=(("held", held),),
        num_train_steps=2,
        progress=False,
        tracker="disabled",
        log_every=1,
        eval_batches=2,
        optimizer=OptimizerConfig(learning_rate=1e-3, warmup=1),
        checkpoint=CheckpointConfig(every=2, async_write=False),
    )
    train = train_step(cfg, "audio/tiny")
    out = ex.run([train, speech, with_text])

    docs = list(read_documents(out[speech]))
    assert len(docs) == 8 and docs[0]["text"] == "It was a bright cold day in the spring."
    wave = mulaw_decode(AudioSample().encode([docs[0]])[0][-97:-1] - 260)  # the first 96 codes, as a waveform
    assert np.abs(wave).max() > 0.01  # speech, not silence (leading silence was trimmed)
    ts = TokenSet(out[with_text])
    assert ts.manifest["tokenizer"]["vocab_size"] == 516 and ts.n_tokens == sum(
        1 + len(d["text"]) + 1 + min(96, d["meta"]["samples"]) + 1 for d in docs
    )
    paths = tuple(MixtureComponent(c.name, out[c.tokens], c.weight) for c in mix.components)
    b = MixtureLoader(mix.replace(components=paths)).batch(0)
    assert (b["loss_mask/text"] + b["loss_mask/audio"] <= b["loss_mask"]).all() and b["loss_mask/audio"].sum() > 0

    hist = [json.loads(line) for line in open(os.path.join(out[train], "history.jsonl"))]
    assert len(hist) == 2 and all(np.isfinite(h["loss/audio"]) and np.isfinite(h["loss/text"]) for h in hist)
    summary = json.load(open(os.path.join(out[train], SUMMARY_FILE)))
    bits = summary["eval/held/audio/bits_per_sample"]
    # barely trained: about log2(516) = 9.0 bits per sample, the uniform guess over the vocabulary
    assert 7.0 < bits < 10.5 and summary["eval/held/audio/targets"] > 0 and "eval/held/text/bits_per_byte" in summary


def test_kmeans_codebook_step_tokenizes_utterances_as_frames(spoken):
    "The codebook step fits on the utterances; its output names a frame-level token set (one token per 20 ms)."
    from marin.data.sources import read_documents
    from marin.data.speech import CodebookConfig, codebook_step
    from marin.data.shards import TokenizeConfig, tokenize_step, TokenSet
    from marin.data.mixture import MixtureConfig, MixtureComponent, MixtureLoader
    from marin.data.sample import FRAME, AudioSample

    ex, speech = spoken
    codebook = codebook_step(CodebookConfig(speech, size=16, iters=3), "speech_test")
    out = ex.run([speech, codebook])
    spec = f"audio:codebook={out[codebook]}"
    tokens = tokenize_step(TokenizeConfig(speech, spec), "tokens/speech_kmeans")
    out = ex.run([speech, codebook, tokens])  # the first two from the cache
    docs = list(read_documents(out[speech]))
    ts = TokenSet(out[tokens])
    assert ts.manifest["tokenizer"]["vocab_size"] == 4 + 256 + 16
    k_tok = AudioSample(codebook=out[codebook]).tokenizer  # the token set records which codebook (its content hash)
    assert ts.manifest["tokenizer"]["hash"] == k_tok.hash != AudioSample().tokenizer.hash
    assert json.loads(k_tok.to_json())["audio"].startswith("kmeans-16x160-")
    assert ts.n_tokens == sum(1 + len(d["text"]) + 1 + -(-d["meta"]["samples"] // FRAME) + 1 for d in docs)
    mix = MixtureConfig((MixtureComponent("k", out[tokens]),), seq_len=128, batch_size=2, sample=spec)
    loader = MixtureLoader(mix)
    b = loader.batch(0)
    assert loader.sample.units["audio"] == "frame" and b["loss_mask/audio"].sum() > 0
    assert b["tokens"].max() < AudioSample(codebook=out[codebook]).vocab_size
