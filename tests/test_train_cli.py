"""`marin train` / `marin sample` (the typer app in marin.train.cli): dry runs that catch problems without compiling,
the 8B preset's per-device estimate, and a real short training run followed by sampling."""

import os
import jax
import pytest
from typer.testing import CliRunner
from marin.train.cli import app, estimate_memory, load_train_config

runner = CliRunner()


@pytest.fixture
def no_compile(monkeypatch):
    "Any jit compilation during the dry run fails the test."

    def boom(*a, **k):
        raise AssertionError("the dry run compiled something")

    monkeypatch.setattr(jax, "jit", boom)
    import equinox as eqx

    monkeypatch.setattr(eqx, "filter_jit", boom)


def test_dry_run_catches_a_missing_data_path(lab, no_compile):
    y = lab / "cfg.yaml"
    y.write_text(
        "preset: nano\ndata: {kind: char, path: /nonexistent/corpus.txt, batch_size: 12, seq_len: 64}\nnum_train_steps: 10\n"
    )
    r = runner.invoke(app, ["train", "--config", str(y), "--dry-run"])
    assert r.exit_code == 1, r.output
    assert "/nonexistent/corpus.txt does not exist" in r.output and "PROBLEM" in r.output


def test_dry_run_catches_an_over_memory_config(lab, no_compile):
    y = lab / "big.yaml"
    y.write_text(
        "preset: 150m\nmodel: {d_model: 8192, n_heads: 64, n_kv_heads: 64, d_ff: 28672, n_layers: 48}\nremat: none\n"
    )
    r = runner.invoke(app, ["train", "--config", str(y), "--dry-run"])
    assert r.exit_code == 1, r.output
    assert "does NOT fit" in r.output and "estimated memory per device (1 devices)" in r.output


def test_8b_on_8_devices_dry_run(lab, no_compile):
    r = runner.invoke(app, ["train", "--config", "8b", "--devices", "8", "--dry-run"])
    out = r.output
    assert "estimated memory per device (8 devices)" in out and "mesh: data=1 fsdp=8 tensor=1" in out
    assert "8 requested but 1 present" in out and "does NOT fit the devices present" in out and r.exit_code == 1
    est = estimate_memory(load_train_config("8b"), 8)
    assert 3.5 < est.params / 2**30 < 4.0  # 8.03e9 * 4 bytes / 8 devices
    assert f"{est.total / 2**30:.2f} GiB" in out or f"{est.total / 2**30:10.3f}".strip() in out


def test_python_config_file_and_bad_spec(lab):
    p = lab / "exp.py"
    p.write_text("from marin.train.cli import PRESETS\nconfig = PRESETS['nano']().replace(num_train_steps=7)\n")
    assert load_train_config(str(p)).num_train_steps == 7
    with pytest.raises(ValueError, match="preset"):
        load_train_config("nonsense")
    y = lab / "bad.yaml"
    y.write_text("preset: nano\nmodel: {n_layerz: 3}\n")
    with pytest.raises(ValueError, match="n_layerz"):
        load_train_config(str(y))


def test_train_then_sample(lab, monkeypatch):
    monkeypatch.setenv("MARIN_TRACKER", "disabled")
    y = lab / "short.yaml"
    y.write_text(
        "preset: nano\nnum_train_steps: 30\neval_batches: 2\nmodel: {n_layers: 1, d_model: 32, n_heads: 2, n_kv_heads: 2, d_ff: 64}\n"
        "optimizer: {warmup: 5}\n"
    )
    r = runner.invoke(app, ["train", "--config", str(y), "--prefix", str(lab / "store")])
    assert r.exit_code == 0, r.output
    out = [l.split("output: ")[1] for l in r.output.splitlines() if l.startswith("output: ")][0]
    assert os.path.exists(os.path.join(out, "checkpoints", "step_00000030", "COMMITTED"))
    again = runner.invoke(app, ["train", "--config", str(y), "--prefix", str(lab / "store")])
    assert again.exit_code == 0 and "cached" in again.output
    s = runner.invoke(app, ["sample", out, "--prompt", "ROMEO:", "--max-tokens", "16", "--temperature", "0"])
    assert s.exit_code == 0, s.output
    text = s.output[:-1]  # echo adds one newline; samples may hold more
    assert text.startswith("ROMEO:") and len(text) == len("ROMEO:") + 16
    bad = runner.invoke(app, ["sample", out, "--prompt", "€"])
    assert bad.exit_code == 2 and "not in the model's vocabulary" in bad.output
