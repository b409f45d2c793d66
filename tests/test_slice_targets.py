"""`marin scale --dry-run --target` and `marin run --dry-run --target`: a tiny rung's exact training step compiled by
the TPU compiler for a v5e slice, the second identical dry run read from the compile cache (and the cache shared by
the two commands: the experiment's training step is the rung's config), bad slices refused before any work. Needs
libtpu (the `tpu` extra); where it cannot load, the compiling tests skip with the reason."""

import os

os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # a deviceless compile drives no chip: no lock needed
import nbformat, pytest
from typer.testing import CliRunner
from marin.cli import app as marin_app
from marin.scaling.cli import app as scale_app
from marin.train.slice_compile import tpu_compiler_available

_ok, _why = tpu_compiler_available()
needs_tpu_compiler = pytest.mark.skipif(not _ok, reason=f"no TPU compiler here: {_why}")
RUNG = ["scale", "--flops", "1e12", "--dry-run", "--target", "v5e-4"]  # tiny-cpu: 0.1M params, 19 x 128 tokens


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    "One store for the module: the run test reads the compile the scale test stored."
    return tmp_path_factory.mktemp("slice_store")


@pytest.fixture
def in_store(store, monkeypatch, tmp_path):
    monkeypatch.setenv("MARIN_PREFIX", str(store))
    monkeypatch.setenv("MARIN_REPORTS_DIR", str(tmp_path / "reports"))
    return store


def said(r) -> str:
    return " ".join(r.output.replace("│", " ").split())  # typer's error box wraps its lines


def test_bad_target_is_refused_before_any_work(in_store):
    for args, msg in (
        (["--target", "v5e-6"], "v5e slices are named by chips"),
        (["--target", "v7x-8"], "use a slice like v5e-8"),
        (["--target", "v5p:2x2"], "a v5p topology has 3 dimensions"),
    ):
        r = CliRunner().invoke(scale_app, ["scale", "--flops", "1e22", "--dry-run", *args])
        assert r.exit_code == 2 and msg in said(r) and "recipe:" not in r.output, r.output
    r = CliRunner().invoke(scale_app, ["scale", "--flops", "1e22", "--run", "--target", "v5p-128"])
    assert r.exit_code == 2 and "use it with --dry-run" in said(r)
    r = CliRunner().invoke(marin_app, ["run", "no_such_notebook", "--dry-run", "--target", "v5e-6"])
    assert r.exit_code == 2 and "v5e slices are named by chips" in said(r), r.output  # before the notebook is looked up
    assert not (in_store / "slice_compiles").exists()


@needs_tpu_compiler
def test_scale_target_compiles_the_rung_then_reads_it_from_the_cache(in_store):
    r = CliRunner().invoke(scale_app, RUNG)
    assert r.exit_code == 0, r.output
    out = r.output
    assert "recommended slice: v5e-4" in out and "on v5e-4: grad_accum" in out
    assert "slice: v5e-4 (v5e:2x2, 4 devices, 1 hosts)" in out and "temporaries" in out and "of 15.75 GiB" in out
    assert "(compiler) vs" in out and "compile cache: v5e-4 compiled in" in out and "not compiled now" not in out
    stored = list((in_store / "slice_compiles").glob("v5e-2x2-*.json"))
    assert len(stored) == 1
    again = CliRunner().invoke(scale_app, RUNG)
    assert again.exit_code == 0 and f"compile cache: v5e-4 read from {stored[0]}" in again.output, again.output
    assert "not compiled now" in again.output and "compiled in" not in again.output
    table = lambda o: [l for l in o.splitlines() if l.startswith("  ") and "GiB" in l]
    assert table(again.output) == table(out)  # the same compiler numbers, read back


@needs_tpu_compiler
def test_run_dry_run_target_compiles_the_experiments_training_steps(in_store, tmp_path):
    body = """from marin.core.executor import executor_main
from marin.scaling.cli import load_recipe, slice_config
from marin.train.slice_compile import parse_target
from marin.train.trainer import train_step

plan = load_recipe("auto", 1e12).plan(1e12, vocab_size=512)
executor_main([train_step(slice_config(plan, parse_target("v5e-4")).config, "tiny/train")])"""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell('issue = "#50"'), nbformat.v4.new_code_cell(body)])
    nb.cells[0].metadata["tags"] = ["parameters"]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "python3", "language": "python"}
    path = tmp_path / "experiments_nb" / "tiny_tpu.ipynb"
    path.parent.mkdir()
    nbformat.write(nb, path)
    r = CliRunner().invoke(marin_app, ["run", str(path), "--dry-run", "--target", "v5e-4"])
    assert r.exit_code == 0, r.output
    assert "run     tiny/train" in r.output and "tiny/train: its training step on v5e-4" in r.output
    assert "slice: v5e-4 (v5e:2x2" in r.output and "dry run complete: nothing was executed" in r.output
    # the same config as the rung `marin scale` compiled above: read, not compiled (where that test ran first)
    assert "compile cache: v5e-4 read from" in r.output or "compile cache: v5e-4 compiled in" in r.output
    again = CliRunner().invoke(marin_app, ["run", str(path), "--dry-run", "--target", "v5e-4"])
    assert again.exit_code == 0 and "compile cache: v5e-4 read from" in again.output, again.output
