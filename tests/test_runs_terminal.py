"""`marin runs list / compare / show` and the report index on a real ledger: two runs of an experiment through
`marin run` (one fails after recording its numbers), a training-like step through the executor, and a record written
before the ledger had a `headline` column."""

import contextlib, io, json, os, subprocess, sys
from dataclasses import dataclass
from types import SimpleNamespace
import pyarrow as pa, pyarrow.parquet as pq
import pytest
from conftest import marin_cmd, REPO
import nbformat
from marin.core.config import versioned
from marin.core.executor import Executor, Step
from marin.core.ledger import LEDGER_SCHEMA, Ledger, RunRecord, _row, utcnow

PROBE = """from marin.core.experiments import record_metrics
loss = 2.0 + 10 * lr
record_metrics(**{"val/loss": loss, "val/bpb": loss / 2}, headline=True)
record_metrics(aside=123.0)
if lr > 0.2:
    raise FloatingPointError(f"loss diverged at lr={lr}")"""


def make_notebook(path, body: str, params: str):
    "An experiment notebook: a `parameters` cell, then `body`."
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(params), nbformat.v4.new_code_cell(body)])
    nb.cells[0].metadata["tags"] = ["parameters"]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "python3", "language": "python"}
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


@dataclass(frozen=True)
class TinyTrainConfig:
    steps: int = versioned(10)


def tiny_train(cfg: TinyTrainConfig, out: str) -> dict:
    "What a training step reports (no headline declared: the defaults pick from these)."
    return {"train/final_loss": 3.25, "train/steps": cfg.steps, "throughput/tokens_per_s": 4321.0, "zz/other": 1.0}


def marin(*args, columns: int = 250):
    "`marin ARGS` as its own process: (exit code, stdout, stderr)."
    env = dict(os.environ, COLUMNS=str(columns))
    r = subprocess.run(marin_cmd(*args), capture_output=True, text=True, cwd=REPO, timeout=300, env=env)
    return r.returncode, r.stdout, r.stderr


def marin_here(*args, columns: int = 250):
    "`marin ARGS` through the same entry point (`marin.cli.main`), in this process: seconds faster a call."
    from marin.cli import main

    out, err, saved = io.StringIO(), io.StringIO(), (sys.argv, os.environ.get("COLUMNS"))
    sys.argv, os.environ["COLUMNS"] = ["marin", *args], str(columns)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
    except SystemExit as e:
        return e.code, out.getvalue(), err.getvalue()
    finally:
        sys.argv = saved[0]
        os.environ.pop("COLUMNS") if saved[1] is None else os.environ.__setitem__("COLUMNS", saved[1])
    raise AssertionError("main() returned without exiting")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    lab = tmp_path_factory.mktemp("lab")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MARIN_PREFIX", str(lab / "store"))
        mp.setenv("MARIN_REPORTS_DIR", str(lab / "reports"))
        mp.setenv("MARIN_LEASE_SECONDS", "3")
        nb = make_notebook(
            lab / "experiments_nb" / "lr_probe.ipynb", PROBE, params='issue = "#53"\nlr = 0.1\nwidth = 64'
        )
        code, out, err = marin("run", str(nb), "--no-render")
        assert code == 0, out + err
        code, out, err = marin("run", str(nb), "-p", "lr", "0.45", "--no-render")
        assert code == 1 and "FloatingPointError" in err, out + err
        Executor(verbose=False, backend="local").run([Step("train/tiny", tiny_train, TinyTrainConfig())])
        led = Ledger()
        old = RunRecord(run_id="old-eval-1", kind="eval", status="SUCCESS", started_at=utcnow(), step="eval/arc")
        old.metrics = {"eval/arc/acc": 0.625, "eval/arc/acc_stderr": 0.05, "eval/seconds": 4.0}
        table = pa.Table.from_pylist([_row(old)], schema=LEDGER_SCHEMA).drop_columns(["headline"])
        os.makedirs(led.records_dir, exist_ok=True)
        pq.write_table(table, os.path.join(led.records_dir, "written-before-headlines.parquet"))
        df = led.sql("SELECT run_id, status, kind FROM runs")
        ids = {(k, s): r for r, s, k in zip(df.run_id, df.status, df.kind)}
        yield SimpleNamespace(
            lab=lab, ok=ids["experiment", "SUCCESS"], bad=ids["experiment", "FAILED"], step=ids["step", "SUCCESS"]
        )


def _row_of(out: str, run_id: str) -> str:
    (line,) = [l for l in out.splitlines() if l.split() and l.split()[0] == run_id]
    return line


def test_list_ends_each_run_with_its_headline(runs):
    code, out, err = marin("runs", "list")  # the installed script, once
    assert code == 0 and out.splitlines()[0].split()[-1] == "headline", out + err
    assert _row_of(out, runs.ok).endswith("  loss=3 bpb=1.5")  # declared, in its order, short names
    assert _row_of(out, runs.bad).endswith("  loss=6.5 bpb=3.25")  # recorded before it failed
    assert _row_of(out, runs.step).endswith("  final_loss=3.25 tokens_per_s=4321")  # the default for a training run
    assert _row_of(out, "old-eval-1").endswith("  acc=0.625")  # a record without the headline column
    assert "aside" not in out and "other" not in out and "stderr" not in out
    code, out, _ = marin_here("runs", "list", "--status", "failed")
    assert code == 0 and runs.bad in out and runs.ok not in out
    code, out, _ = marin_here("runs", "list", "--kind", "eval")
    assert code == 0 and "old-eval-1" in out and runs.ok not in out
    code, narrow, _ = marin_here("runs", "list", columns=100)  # the headline column is cut to fit, one line a run
    assert len(narrow.splitlines()) == 5 and _row_of(narrow, runs.step).endswith("…"), narrow


def test_compare_prints_what_differs_and_the_headlines(runs):
    code, out, err = marin_here("runs", "compare", runs.ok[:-2], runs.bad)
    assert code == 0, out + err
    cells = {l.split()[0]: l.split()[1:] for l in out.splitlines() if l.split()}
    assert cells["lr"] == ["0.1", "0.45"] and cells["status"] == ["SUCCESS", "FAILED"], out
    assert "width" not in cells and "issue" not in cells and "1 field(s) differ, 2 the same" in out  # equal fields
    assert cells["val/loss"] == ["3", "6.5"] and cells["val/bpb"] == ["1.5", "3.25"] and "aside" not in out
    assert cells["error"] == ["-", "FloatingPointError:", "loss", "diverged", "at", "lr=0.45"], out
    code, out, err = marin_here("runs", "compare", runs.ok, runs.step, "--json")
    c = json.loads(out)
    assert [r["run_id"] for r in c["runs"]] == [runs.ok, runs.step]
    assert c["config_diff"]["lr"] == [0.1, None] and c["config_diff"]["steps"] == [None, 10]
    assert c["headline"] == {
        "val/loss": [3.0, None],
        "val/bpb": [1.5, None],
        "train/final_loss": [None, 3.25],
        "throughput/tokens_per_s": [None, 4321.0],
    }


def test_compare_refuses_what_it_cannot_compare(runs):
    for args, says in [
        ([runs.ok], "takes 2 to 8 run ids, got 1"),
        ([runs.ok, "no-such-run"], "no run with id 'no-such-run'"),
        ([runs.ok, runs.ok[:-3]], f"{runs.ok} given twice"),
        ([runs.ok] * 9, "got 9"),
    ]:
        code, out, err = marin_here("runs", "compare", *args)
        assert code == 2 and err.startswith("error: ") and says in err and "Traceback" not in err, (args, err)


def test_show_leads_with_a_summary(runs):
    code, out, err = marin_here("runs", "show", runs.bad)
    assert code == 0, err
    summary, fields = out.split("\nevery field:\n")
    lines = dict(l.split(None, 1) for l in summary.splitlines())
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=REPO).stdout.strip()
    assert out.startswith(f"run       {runs.bad}\n") and lines["status"] == "FAILED"
    assert lines["kind"] == "experiment (experiment lr_probe, issue #53)"
    assert lines["headline"] == "val/loss=6.5 val/bpb=3.25" and lines["git"].startswith(head[:12])
    assert lines["error"] == "FloatingPointError: loss diverged at lr=0.45" and "CPUs on" in lines["hardware"]
    assert lines["when"].endswith(" s") and ", took " in lines["when"]
    assert "\nconfig: {" in "\n" + fields and '"lr": 0.45' in fields  # then every field, as before
    code, out, _ = marin_here("runs", "show", runs.bad, "--json")
    rec = json.loads(out)
    assert rec["headline"] == ["val/loss", "val/bpb"] and rec["metrics"]["aside"] == 123.0 and rec["status"] == "FAILED"
    code, out, _ = marin_here("runs", "show", "old-eval")
    assert code == 0 and "\nheadline  eval/arc/acc=0.625\n" in out and "error" not in out.split("every field")[0]


def test_report_index_shows_declared_headlines(runs):
    code, out, err = marin("report", "build")
    assert code == 0, out + err
    page = (runs.lab / "reports" / "_site" / "index.html").read_text()
    assert "<th>headline metrics</th>" in page and "<code>val/loss</code> = 6.5" in page
    assert "<code>val/bpb</code> = 1.5" in page and "aside" not in page
