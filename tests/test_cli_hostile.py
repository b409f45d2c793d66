"""Hostile input to the `marin` command (issue #19): every usage error is a clear message naming the flag, field, file
or step and an exit code, never a traceback; a damaged ledger stays readable; the ledger's SQL is read-only.

Most cases run `marin.cli.main` in this process (what the `marin` script runs, with its real error handler) to keep
the suite cheap; two go through the real entry point in a subprocess."""

import os, subprocess, sys, warnings
import nbformat
import pytest
from conftest import marin_cmd, REPO
from marin.cli import main


@pytest.fixture
def marin(lab, capsys, monkeypatch):
    "`marin(*args)` runs `marin ARGS` in this process: (exit code, stdout, stderr)."
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)  # main() installs its own; put it back after
    monkeypatch.chdir(lab)

    def run(*args: str) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["marin", *args])
        capsys.readouterr()
        try:
            main()
            code = 0
        except SystemExit as e:
            code = e.code
        out, err = capsys.readouterr()
        assert "Traceback" not in out + err, out + err
        return code, out, err

    return run


@pytest.mark.parametrize(
    "args, says",
    [
        (["train", "--steps", "abc", "-c", "nano"], "Invalid value for '--steps'"),
        (["scale", "--flops", "abc"], "Invalid value for '--flops'"),
        (["runs", "list", "--bogus"], "No such option: --bogus"),
        (["train"], "Missing option '--config'"),
        (["runs", "show"], "Missing argument 'run_id'"),
    ],
)
def test_usage_errors_print_usage_and_exit_2(marin, args, says):
    code, _, err = marin(*args)
    assert code == 2 and says in err and f"Usage: marin {args[0]}" in err, err


def test_unknown_command_through_the_real_entry_point(lab):
    r = subprocess.run(marin_cmd("nosuchcommand"), capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "No such command 'nosuchcommand'" in r.stderr and "Usage: marin" in r.stderr
    assert "Traceback" not in r.stderr, r.stderr


def test_data_import_of_bad_files_names_the_file_and_the_flag(marin, lab):
    inputs = lab / "in"
    inputs.mkdir()
    (inputs / "empty.jsonl").write_text("")
    (inputs / "binary.jsonl").write_bytes(bytes(range(256)) * 4)
    (inputs / "malformed.jsonl").write_text('{"text": "fine"}\n{"text": broken\n')
    (inputs / "schema.jsonl").write_text('{"body": "hello"}\n')
    for name, says in [
        ("empty", "yielded no documents"),
        ("binary", "binary.jsonl line 1: not JSON"),
        ("malformed", "malformed.jsonl line 2: not JSON"),
        ("schema", "no field 'text' (fields: ['body']); set --text-field"),
    ]:
        code, _, err = marin("data", "import", name, str(inputs / f"{name}.jsonl"))
        assert code == 1 and err.startswith(f"error: step documents/{name} failed: ") and says in err, err
        assert ".executor_status.json" in err and "marin runs show" in err  # where the traceback is
        assert "SourceConfig" not in err, err  # the flags, not the config's fields
    code, _, err = marin("data", "import", "gone", str(inputs / "nowhere.jsonl"))
    assert code == 2 and "fix the path in PATHS" in err, err


@pytest.mark.parametrize(
    "text, says",
    [
        ("preset: nano\nmodel:\n  d_model: 64\n bad: [1,\n", "bad.yaml, line 4, column 2: not valid YAML"),
        ("- 1\n- 2\n", "expected a mapping of `field: value` lines, got a YAML list"),
        ("preset: nano\noptimizer:\n  learning_rate: fast\n", "optimizer.learning_rate: expected a number (float)"),
        ("preset: nano\nmodel: 5\n", "model: expected a mapping of LlamaConfig fields, got int 5"),
        ("preset: nano\nnum_train_steps: many\n", "num_train_steps: expected int, got str 'many'"),
    ],
)
def test_train_config_files_name_the_file_and_field(marin, lab, text, says):
    (lab / "bad.yaml").write_text(text)
    code, _, err = marin("train", "--config", str(lab / "bad.yaml"), "--dry-run")
    assert code == 2 and err.startswith("error: ") and says in err and "bad.yaml" in err, err


def test_run_with_a_broken_parameters_cell(marin, lab):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("steps = 10\nlr = (0.1", metadata={"tags": ["parameters"]})]
    nbformat.write(nb, str(lab / "broken.ipynb"))
    code, _, err = marin("run", str(lab / "broken.ipynb"))
    assert code == 2 and "broken.ipynb: the parameters cell is not valid Python (line 2" in err, err


def test_export_of_a_missing_step_lists_the_steps_there(marin, lab):
    run = lab / "store" / "train" / "tiny-0123456789"
    for step in (3, 7):
        (run / "checkpoints" / f"step_{step:08d}").mkdir(parents=True)
        (run / "checkpoints" / f"step_{step:08d}" / "COMMITTED").write_text("")
    code, _, err = marin("export", "--checkpoint", str(run), "--output", str(lab / "hf"), "--step", "12345")
    assert code == 2 and "no committed checkpoint of step 12345 (there are [3, 7])" in err, err
    assert not (lab / "hf").exists()


def test_download_of_a_folder_without_weights_fails(marin, lab):
    (lab / "notes").mkdir()
    (lab / "notes" / "README.md").write_text("not a model")
    code, out, err = marin("download", "--model", str(lab / "notes"), "--output", str(lab / "dl"))
    assert code == 2 and "no model weights (*.safetensors" in err and "it holds README.md" in err, err
    assert "verified" not in out and not (lab / "dl").exists()


def _ledger(lab):
    "The lab's ledger with two runs, and the folder of their record files."
    from marin.core.ledger import Ledger, RunRecord, utcnow

    led = Ledger(str(lab / "store" / "ledger"))
    led.append(RunRecord(run_id="ok-1", kind="step", status="SUCCESS", started_at=utcnow(), step="a"))
    led.append(RunRecord(run_id="ok-2", kind="step", status="FAILED", started_at=utcnow(), step="b", error="boom"))
    return led, os.path.dirname(led._files()[0])


def _damaged_ledger(lab):
    "The two runs' ledger plus a truncated, an empty and a foreign Parquet file among its records."
    import pyarrow as pa, pyarrow.parquet as pq

    led, day = _ledger(lab)
    with open(os.path.join(day, "truncated.parquet"), "wb") as f:
        f.write(open(led._files()[0], "rb").read()[:80])
    open(os.path.join(day, "empty.parquet"), "wb").close()
    pq.write_table(pa.table({"x": [1, 2]}), os.path.join(day, "foreign.parquet"))
    return led, day


def test_damaged_ledger_stays_readable_through_the_real_entry_point(lab):
    led, _ = _damaged_ledger(lab)
    r = subprocess.run(marin_cmd("runs", "list"), capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.returncode == 0 and "ok-1" in r.stdout and "ok-2" in r.stdout, r.stderr
    warned = [l for l in r.stderr.splitlines() if l.startswith("warning: ledger: skipped")]
    assert len(warned) == 3 and all("marin runs doctor" in l for l in warned) and "Traceback" not in r.stderr, r.stderr


def test_damaged_ledger_show_sql_compact_and_doctor(marin, lab):
    led, day = _damaged_ledger(lab)
    code, out, err = marin("runs", "show", "ok-2")
    assert code == 0 and "error: boom" in out, err
    code, out, err = marin("runs", "sql", "SELECT count(*) AS n FROM runs")
    assert code == 0 and out.split() == ["n", "2"], out + err
    code, out, err = marin("runs", "compact")
    assert code == 0 and out == "folded 2 files\n", out + err
    assert sorted(os.listdir(day)) == ["empty.parquet", "foreign.parquet", "truncated.parquet"]  # left for the doctor
    code, out, err = marin("runs", "doctor")
    assert code == 0 and out.count("moved to") == 3 and str(led.quarantine_dir) in out, out
    moved = sorted(os.listdir(os.path.join(led.quarantine_dir, os.path.basename(day))))
    assert moved == ["empty.parquet", "foreign.parquet", "truncated.parquet"] and os.listdir(day) == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        code, out, err = marin("runs", "list")
    assert code == 0 and "ok-1" in out and "warning" not in err, err


def test_runs_sql_is_read_only(marin, lab):
    led, day = _ledger(lab)
    for query in [
        f"COPY (SELECT * FROM records) TO '{day}/forged.parquet'",
        f"COPY (SELECT 1) TO '{lab}/elsewhere.csv'",
        f"ATTACH '{lab}/other.duckdb'",
        "SELECT * FROM read_text('/etc/passwd')",
        f"SELECT * FROM read_parquet('{led._files()[0]}')",
        "INSTALL httpfs",
        "LOAD httpfs",
        "SET enable_external_access = true",
    ]:
        code, out, err = marin("runs", "sql", query)
        assert code == 2 and err.startswith("error: SQL error") and "root:" not in out, (query, out, err)
    assert not os.path.exists(os.path.join(day, "forged.parquet")) and not (lab / "elsewhere.csv").exists()
    assert not (lab / "other.duckdb").exists()
    code, out, _ = marin("runs", "sql", "SELECT run_id FROM runs WHERE status = 'FAILED'")
    assert code == 0 and out.split() == ["run_id", "ok-2"]
