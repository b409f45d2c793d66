"Experiments through `marin run`: parameter checks, success, failure with the failing cell, the report site in headless Chromium."

import http.server, json, os, re, subprocess, threading
from functools import partial
from pathlib import Path
import nbformat, pytest
from conftest import chromium, marin_cmd, REPO


def make_notebook(path: Path, body: str, params: str = 'issue = "#2"\ngreeting = "hello"\nrepeat = 2') -> Path:
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(params),
            nbformat.v4.new_code_cell(body),
            nbformat.v4.new_markdown_cell("## Retrospective\n\nfine"),
        ]
    )
    nb.cells[0].metadata["tags"] = ["parameters"]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "python3", "language": "python"}
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


OK_BODY = """from marin.core.experiments import record_metrics
print((greeting + '-from-ok ') * repeat)
record_metrics(**{'eval/score': 0.75})"""
FAIL_BODY = """print('before the failure')
x = 1 / 0"""


def run(*args, **kw):
    return subprocess.run(
        marin_cmd(*args), capture_output=True, text=True, env=os.environ, cwd=kw.get("cwd"), timeout=300
    )


@pytest.fixture
def experiments(lab):
    d = lab / "experiments_nb"
    return make_notebook(d / "ok.ipynb", OK_BODY), make_notebook(d / "fails.ipynb", FAIL_BODY)


def test_bad_parameters_are_refused_before_running(experiments, lab):
    ok, _ = experiments
    for args, needle in [
        (["-p", "greting", "x"], "unknown parameter(s) greting"),
        (["-p", "repeat", "two"], "repeat='two': expected a int"),
        ([], None),
    ]:
        if needle is None:
            continue
        r = run("run", str(ok), *args)
        assert r.returncode == 2, r.stderr
        assert r.stderr.count("\n") == 1 and needle in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = run("run", str(lab / "nope.ipynb"))
    assert r.returncode == 2 and "experiment not found" in r.stderr
    assert not (lab / "reports").exists() or not list((lab / "reports").rglob("*.ipynb")), (
        "nothing may run on bad input"
    )


def dump_dom(url: str, profile: Path) -> str:
    cmd = [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=3000",
        "--dump-dom",
        url,
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def test_success_and_failure_are_recorded_and_rendered(experiments, lab):
    "Both runs are in the ledger (the failing cell and partial output kept), and the report site shows them in Chromium."
    ok, fails = experiments
    r = run("run", str(ok), "-p", "greeting", "hi", "-p", "repeat", "3")
    assert r.returncode == 0, r.stderr + r.stdout
    assert "SUCCESS" in r.stdout and "eval/score=0.75" in r.stdout
    r = run("run", str(fails))
    assert r.returncode == 1 and "ZeroDivisionError" in r.stderr
    from marin.core.ledger import Ledger

    df = Ledger(str(lab / "store" / "ledger")).sql("SELECT * FROM runs WHERE kind = 'experiment' ORDER BY started_at")
    assert list(df.experiment) == ["ok", "fails"] and list(df.status) == ["SUCCESS", "FAILED"]
    failed = df.iloc[1]
    assert (
        "ZeroDivisionError" in failed.error
        and "x = 1 / 0" in failed.failing_cell
        and "ZeroDivisionError" in failed.traceback
    )
    assert json.loads(df.iloc[0].config)["greeting"] == "hi" and json.loads(df.iloc[0].metrics) == {"eval/score": 0.75}
    assert df.iloc[0].issue == "#2"
    kept = nbformat.read(failed.report_path, as_version=4)
    assert any("before the failure" in str(c.get("outputs")) for c in kept.cells), (
        "partial output of a failed run is kept"
    )
    ok_nb = nbformat.read(df.iloc[0].report_path, as_version=4)
    assert "hi-from-ok hi-from-ok hi-from-ok" in str(ok_nb.cells)

    # the report site of those two runs, as a browser shows it (headless Chromium)
    r = run("report", "build")
    assert r.returncode == 0, r.stderr
    site = lab / "reports" / "_site"
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        index = dump_dom(f"{base}/index.html", lab / "chrome")
        rows = re.findall(r"<tr class=\"run\" data-status=\"(\w+)\">(.*?)</tr>", index, re.S)
        assert sorted(s for s, _ in rows) == ["FAILED", "SUCCESS"], index[:3000]
        links = dict((s, re.search(r'href="([^"]+)"', body).group(1)) for s, body in rows)
        ok_page = dump_dom(f"{base}/{links['SUCCESS']}", lab / "chrome")
        failed_page = dump_dom(f"{base}/{links['FAILED']}", lab / "chrome")
        assert "hi-from-ok" in ok_page
        assert "ZeroDivisionError" in failed_page and "before the failure" in failed_page
    finally:
        server.shutdown()


def test_every_experiment_parameter_parses_in_papermill():
    "papermill's own parser (used for `papermill --help-notebook` and its warnings) reads each parameter we read: a '=' in a parameter's comment breaks it."
    from papermill.translators import PythonTranslator
    from marin.core.experiments import experiment_parameters

    notebooks = sorted((REPO / "experiments_nb").glob("*.ipynb"))
    assert notebooks, "no experiment notebooks found"
    for nb_path in notebooks:
        nb = nbformat.read(str(nb_path), as_version=4)
        cell = next(c for c in nb.cells if c.cell_type == "code" and "parameters" in c.metadata.get("tags", []))
        ours = set(experiment_parameters(nb_path))
        theirs = {p.name for p in PythonTranslator.inspect(cell)}
        assert ours == theirs, (
            f"{nb_path.name}: papermill cannot parse parameter(s) {sorted(ours - theirs)}; "
            "keep '=' out of parameter comments (write ≥, 'is' or ':')"
        )


def test_runs_leave_the_checkout_clean_and_git_dirty_means_the_users_code(tmp_path, monkeypatch):
    """In a repository of its own, with the default settings (no MARIN_PREFIX or MARIN_REPORTS_DIR): `marin run`
    writes its executed notebook under the prefix (ignored by git), so the tree stays clean and the run records
    git_dirty=False; `--publish` writes into the tracked reports/, and a later change there (the lab's own record)
    does not make the next run dirty; a change to a tracked file of the user's code does."""
    for k in ("MARIN_PREFIX", "MARIN_REPORTS_DIR", "MARIN_PUBLISH_DIR", "MARIN_SETTINGS"):
        monkeypatch.delenv(k, raising=False)
    repo = tmp_path / "lab"
    (repo / "reports").mkdir(parents=True)
    (repo / "reports" / ".gitkeep").write_text("")
    (repo / "settings.ini").write_text("[marin]\nprefix = local_store\n")
    (repo / ".gitignore").write_text("local_store/\nreports/_site/\n")
    (repo / "code.py").write_text("x = 1\n")
    make_notebook(repo / "experiments_nb" / "ok.ipynb", OK_BODY)
    git = lambda *a: subprocess.run(["git", *a], cwd=repo, capture_output=True, text=True, check=True).stdout
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "lab")
    for args in ([], ["--publish"]):
        r = run("run", "experiments_nb/ok.ipynb", *args, cwd=repo)
        assert r.returncode == 0, r.stderr + r.stdout
        if args:  # published: in the repository's reports/, for the user to review and commit
            assert list((repo / "reports" / "ok").glob("*.ipynb")) and f"notebook: {repo}/reports/ok/" in r.stdout
        else:
            assert f"notebook: {repo}/local_store/reports/ok/" in r.stdout, r.stdout
    assert git("status", "--porcelain", "--untracked-files=no") == ""  # reports/ok/ is new: untracked, not dirty
    git("add", "reports")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "publish")
    (next((repo / "reports" / "ok").glob("*.json"))).write_text("{}")  # the lab's own record changed: not dirty
    assert run("run", "experiments_nb/ok.ipynb", cwd=repo).returncode == 0
    (repo / "code.py").write_text("x = 2\n")  # the user's code changed: dirty
    assert run("run", "experiments_nb/ok.ipynb", cwd=repo).returncode == 0
    from marin.core.ledger import Ledger

    runs = Ledger(str(repo / "local_store" / "ledger")).sql(
        "SELECT git_dirty FROM runs WHERE kind = 'experiment' ORDER BY started_at"
    )
    assert list(runs.git_dirty) == [False, False, False, True], runs


def test_a_run_stopped_by_sigterm_is_recorded_failed_with_its_kernel_gone(lab):
    "A scheduler ending the job (SIGTERM to `marin run`): the ledger says FAILED and why, not RUNNING for ever."
    import signal, time

    nb = make_notebook(
        lab / "experiments_nb" / "long.ipynb",
        "import os, pathlib, time\npathlib.Path(os.environ['MARIN_REPORTS_DIR'], 'kernel.pid').write_text(str(os.getpid()))\n"
        "time.sleep(300)",
    )
    proc = subprocess.Popen(
        marin_cmd("run", str(nb)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=os.environ
    )
    from marin.core.ledger import Ledger

    led, deadline = Ledger(str(lab / "store" / "ledger")), time.time() + 120
    pid = lab / "reports" / "kernel.pid"  # the notebook's kernel writes it: the sleeping cell has begun
    while time.time() < deadline and not (pid.exists() and pid.read_text()):
        time.sleep(0.2)
    kernel = int(pid.read_text())
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0, out[-2000:]
    df = led.sql("SELECT status, error FROM runs WHERE kind = 'experiment' AND experiment = 'long'")
    assert list(df.status) == ["FAILED"] and "SIGTERM" in df.error[0], (df, out[-2000:])
    time.sleep(1)
    assert not Path(f"/proc/{kernel}").exists() or "zombie" in Path(f"/proc/{kernel}/status").read_text().lower()
