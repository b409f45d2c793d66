"""`marin dashboard` and the report site in a real browser: headless Chromium, driven over the DevTools protocol on a
pipe, against the real command (`marin dashboard --api-key`) serving a small ledger, a built report site, and a real
`marin train` run that trains while the browser watches its curves."""

import base64, datetime as dt, json, os, signal, subprocess, threading, time, urllib.error, urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
import nbformat, pytest
from conftest import chromium, marin_cmd

KEY = "dash-test-key"
SHOTS = os.environ.get("MARIN_SHOTS_DIR", "")  # screenshots of each page go here when set (none by default)


def _high(fd: int) -> int:
    "`fd` moved to a number above 9."
    import fcntl

    high = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
    os.close(fd)
    return high


class Browser:
    "Headless Chromium over `--remote-debugging-pipe` (CDP messages as JSON, each ended by a NUL byte)."

    def __init__(self, profile: Path):
        to_chrome_r, self._w = os.pipe()
        self._r, from_chrome_w = os.pipe()
        # the browser's ends above fd 9, so that `3<&X 4>&Y` never reads an fd it has just replaced (bash: dash reads one digit)
        to_chrome_r, from_chrome_w = (_high(fd) for fd in (to_chrome_r, from_chrome_w))
        args = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync",
                "--disable-background-networking", "--disable-component-update", "--window-size=1300,1000",
                f"--user-data-dir={profile}", "--remote-debugging-pipe", "about:blank"]  # fmt: skip
        # the pipe is fds 3 (commands in) and 4 (replies out) of the browser
        cmd = " ".join(f"'{a}'" for a in args) + f" 3<&{to_chrome_r} 4>&{from_chrome_w}"
        self.proc = subprocess.Popen(["bash", "-c", "exec " + cmd], pass_fds=(to_chrome_r, from_chrome_w),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        os.close(to_chrome_r), os.close(from_chrome_w)
        self._id, self._replies, self._cv = 0, {}, threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]

    def _read(self):
        buf = b""
        while chunk := os.read(self._r, 1 << 16):
            buf += chunk
            *msgs, buf = buf.split(b"\0")
            for m in msgs:
                msg = json.loads(m)
                if "id" in msg:
                    with self._cv:
                        self._replies[msg["id"]] = msg
                        self._cv.notify_all()

    def send(self, method: str, session: str | None = None, **params) -> dict:
        self._id += 1
        i, msg = self._id, {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        with self._cv:
            assert self._cv.wait_for(lambda: i in self._replies, 60), f"no reply to {method}"
            reply = self._replies.pop(i)
        assert "error" not in reply, (method, reply["error"])
        return reply["result"]

    def eval(self, js: str):
        r = self.send("Runtime.evaluate", self.session, expression=js, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in r, r["exceptionDetails"]
        return r["result"].get("value")

    def open(self, url: str, ready: str, timeout: float = 20):
        "Navigate to `url` and wait until the JS expression `ready` is truthy."
        self.eval("window.__old_page = true")  # so that `ready` is never judged on the page being left
        self.send("Page.navigate", self.session, url=url)
        return self.wait(f"!window.__old_page && ({ready})", timeout, url)

    def wait(self, cond: str, timeout: float = 20, what: str = ""):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                v = self.eval(
                    f"(() => {{ try {{ const v = {cond}; return v instanceof Node || v; }} catch (e) {{ return null; }} }})()"
                )
            except AssertionError:
                v = None
            if v:
                return v
            time.sleep(0.1)
        raise AssertionError(f"{what}: never true: {cond}\n{self.eval('document.body && document.body.innerText')}")

    def shot(self, name: str) -> None:
        "A screenshot of the page into MARIN_SHOTS_DIR, when set (for a closing note; not a test artifact)."
        if not SHOTS:
            return
        try:
            Path(SHOTS).mkdir(parents=True, exist_ok=True)
            data = self.send("Page.captureScreenshot", self.session, format="png")["data"]
            (Path(SHOTS) / f"{name}.png").write_bytes(base64.b64decode(data))
        except (OSError, AssertionError):
            pass

    def links(self) -> list[str]:
        return self.eval("[...document.querySelectorAll('a[href]')].map(a => a.href)")

    def close(self):
        self.proc.kill()
        self.proc.wait(10)


# ---- the lab the browser looks at ---------------------------------------------------------------------------------
def _records(prefix: Path):
    "A tiny ledger: an experiment's good and failed run, two training runs with curves, an eval run."
    from marin.core.ledger import Ledger, RunRecord

    t0 = dt.datetime(2026, 3, 1, tzinfo=dt.timezone.utc)
    recs = []
    for i, n_layers in enumerate((2, 4)):
        out = prefix / f"train-{n_layers}"
        (out / ".tracking").mkdir(parents=True)
        (out / "history.jsonl").write_text(
            "".join(json.dumps({"step": s, "loss": 4 - s * (0.05 + 0.02 * i), "grad_norm": 1, "lr": 1e-3}) + "\n" for s in range(20))
        )  # fmt: skip
        (out / ".tracking" / "metrics.jsonl").write_text(
            "".join(json.dumps({"step": s, "throughput/mfu": 0.1 + i / 10}) + "\n" for s in (10, 20))
        )
        recs.append(RunRecord(
            run_id=f"train-L{n_layers}", kind="step", step="train/nano", status="SUCCESS", output_path=str(out),
            started_at=t0 + dt.timedelta(hours=i), ended_at=t0 + dt.timedelta(hours=i, seconds=20),
            config={"model": {"n_layers": n_layers, "d_model": 32}, "seed": 0}, metrics={"train/final_loss": 3.0 - i},
        ))  # fmt: skip
    recs += [
        RunRecord(run_id="lr-ok", kind="experiment", experiment="lr_sweep", status="SUCCESS", issue="#53",
                  started_at=t0 - dt.timedelta(days=1), config={"lr": 0.1}, metrics={"eval/acc": 0.5},
                  headline=["eval/acc"]),
        RunRecord(run_id="lr-bad", kind="experiment", experiment="lr_sweep", status="FAILED", issue="#53",
                  started_at=t0 - dt.timedelta(hours=20), config={"lr": 3.0},
                  error="FloatingPointError: loss is nan at step 3", traceback="Traceback (most recent call last):\n  x\nFloatingPointError: loss is nan at step 3"),
        RunRecord(run_id="eval-1", kind="step", step="eval/nano", status="SUCCESS", started_at=t0 + dt.timedelta(days=1),
                  metrics={"eval/overall/bpb": 1.25}),
    ]  # fmt: skip
    Ledger(str(prefix / "ledger")).append(*recs)


MATH = r"The optimum $L^*(3 \times 10^{12})$ falls as $$\sum_i x_i^2$$ grows."


def _site(reports: Path):
    "Two runs of one experiment, rendered: math in the prose, and a retrospective written for the first run."
    from marin.core.reports import build_site, write_run_card

    for rid, day in (("lr_sweep-20260301-000000-aaaaaa", 1), ("lr_sweep-20260302-000000-bbbbbb", 2)):
        nb = nbformat.v4.new_notebook(cells=[
            nbformat.v4.new_markdown_cell(MATH),
            nbformat.v4.new_code_cell("print(6 * 7)", outputs=[nbformat.v4.new_output("stream", text="42\n")]),
            nbformat.v4.new_markdown_cell("## Retrospective\n\nRun `lr_sweep-20260301-000000-aaaaaa` found $\\eta^* = 0.1$."),
        ])  # fmt: skip
        p = reports / "lr_sweep" / f"{rid}.ipynb"
        p.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, p)
        write_run_card(p, dict(run_id=rid, status="SUCCESS", experiment="lr_sweep", started_at=f"2026-03-0{day}T00:00:00",
                               metrics={"eval/acc": 0.5 + day / 10, "eval/n": 9}, headline=["eval/acc"]))  # fmt: skip
    (reports / "lessons.md").write_text("# Lessons\n\nThe loss at $t_1$ and $t_2$ agrees.\n")
    build_site(reports, use_quarto=False, verbose=False, ledger=False)


TRAIN_YAML = (
    "preset: nano\nnum_train_steps: 100000\nlog_every: 5\neval_every: 0\n"
    "model: {n_layers: 1, d_model: 32, n_heads: 2, n_kv_heads: 2, d_ff: 64}\n"
)


def _wait_http(url: str, proc, timeout: float = 90):
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else "exited"
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"{url} never answered")


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    "The ledger and site, a training run started (it trains for the whole module), the dashboard, the browser."
    from marin.cluster.local import free_port

    root = tmp_path_factory.mktemp("dash")
    env = dict(os.environ, MARIN_PREFIX=str(root / "store"), MARIN_REPORTS_DIR=str(root / "reports"),
               MARIN_TRACKER="disabled", MARIN_API_KEY=KEY)  # fmt: skip
    (root / "train.yaml").write_text(TRAIN_YAML)
    train = subprocess.Popen(marin_cmd("train", "-c", str(root / "train.yaml"), "--name", "train/live"), env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    port = free_port()
    dash = subprocess.Popen(marin_cmd("dashboard", "--port", str(port)), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    browser = Browser(root / "chrome")
    _records(root / "store")  # while the dashboard starts: it reads the ledger and the site at each request
    _site(root / "reports")
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_http(base + "/health", dash)
        browser.open(f"{base}/compare?key={KEY}", "document.querySelector('main')")  # the key once: a cookie after
        yield dict(base=base, browser=browser, train=train, root=root)
    finally:
        browser.close()
        for p in (train, dash):
            p.send_signal(signal.SIGTERM)
        for p in (train, dash):
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()


def _get(url: str, key: str | None = KEY) -> tuple[int, str]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


# ---- the tests ------------------------------------------------------------------------------------------------------
def test_api_key_and_read_only_sql(lab):
    "The key `marin serve` takes guards every route but /health; the SQL box refuses writes, as `marin runs sql` does."
    base = lab["base"]
    assert _get(base + "/api/runs", key=None)[0] == 401 and _get(base + "/api/runs", key="wrong")[0] == 401
    assert _get(base + "/health", key=None)[0] == 200
    code, body = _get(base + "/api/runs?family=train&sort=metric:train/final_loss&desc=0")
    assert code == 200 and [r["run_id"] for r in json.loads(body)["rows"]][:2] == ["train-L4", "train-L2"], body[:500]
    code, body = _get(base + "/api/sql?" + urllib.parse.urlencode({"q": "COPY (SELECT 1) TO '/tmp/dash-x.csv'"}))
    assert code == 400 and "read-only" in json.loads(body)["error"] and not Path("/tmp/dash-x.csv").exists()


def test_runs_table_filters_in_the_browser(lab):
    "The page's script applies the filters in its URL; a failed run's error is one click away; sorting by a metric."
    b, base = lab["browser"], lab["base"]
    b.open(f"{base}/", "document.querySelectorAll('tr.run').length >= 5")
    ids = lambda: b.eval("[...document.querySelectorAll('tr.run')].map(r => r.dataset.run)")
    assert {"lr-ok", "lr-bad", "train-L2", "train-L4", "eval-1"} <= set(ids())
    b.shot("dashboard_runs")
    b.open(f"{base}/?status=FAILED", "document.querySelector('#count')")
    assert ids() == ["lr-bad"]
    b.eval("document.querySelector('tr.run details').open = true")
    assert "loss is nan at step 3" in b.eval("document.querySelector('tr.run details').innerText")
    b.shot("dashboard_runs_failed")
    b.open(f"{base}/?experiment=lr_sweep&config=lr%3D0.1", "document.querySelector('#count')")
    assert ids() == ["lr-ok"]
    b.open(f"{base}/?family=train&sort=metric:train/final_loss&desc=0", "document.querySelector('#count')")
    assert ids()[:2] == ["train-L4", "train-L2"] and "train/final_loss" in b.eval(
        "document.querySelector('#runs thead').innerText"
    )
    b.open(f"{base}/?metric=train/final_loss%3C2.5", "document.querySelector('#count')")
    assert ids() == ["train-L4"]
    b.open(f"{base}/run/lr-bad", "document.querySelector('#error')")
    assert "FloatingPointError" in b.eval("document.querySelector('#error').innerText")


def test_compare_overlays_two_curves(lab):
    "A comparison: the config diff holds only what differs, and the loss chart carries one series per run."
    b, base = lab["browser"], lab["base"]
    b.open(
        f"{base}/compare?runs=train-L2,train-L4", "document.querySelector('.chart[data-chart=\"train/loss\"] canvas')"
    )
    loss = b.eval(
        "(() => { const c = document.querySelector('.chart[data-chart=\"train/loss\"]'); return [c.dataset.series, c.dataset.points, c.innerText]; })()"
    )
    assert loss[0] == "2" and loss[1] == "40" and "train-L2" in loss[2] and "train-L4" in loss[2], loss
    diff = b.eval("document.querySelector('table.diff').innerText")
    assert "model.n_layers" in diff and "seed" not in diff and "d_model" not in diff, diff
    b.shot("dashboard_compare")


def test_report_site_math_nav_and_every_link(lab):
    "The site under /reports/: math typeset offline (no `$` left), the header on every page, the retrospective's note, and every link on every page of the dashboard and the site answers."
    b, base = lab["browser"], lab["base"]
    pages = {
        "site_index": (f"{base}/reports/", "document.querySelector('nav.marin-nav .marin-exps a')"),
        "site_run": (
            f"{base}/reports/lr_sweep/lr_sweep-20260302-000000-bbbbbb.html",
            "document.querySelector('.katex')",
        ),
        "site_retrospective": (f"{base}/reports/lessons.html", "document.querySelector('.katex')"),
    }
    links = set()
    for name, (url, ready) in pages.items():
        b.open(url, ready)
        if name != "site_index":
            b.wait("document.querySelectorAll('.katex').length >= 2", 10, url)
            text = b.eval("document.body.innerText")
            assert "$" not in text and "\\times" not in text, text[:2000]  # typeset, no raw TeX left
        assert (
            b.eval("[...document.querySelectorAll('nav.marin-nav a')].map(a => a.textContent).join('|')")
            == "all runs|lr_sweep"
        )
        b.shot(name)
        links |= set(b.links())
    run_page = b.open(pages["site_run"][0], "document.body.innerText")
    assert "Written for another run" in run_page and "lr_sweep-20260301-000000-aaaaaa" in run_page
    b.open(f"{base}/reports/", "document.querySelector('#exp-lr_sweep')")
    assert "Headline (latest successful run): eval/acc = 0.7" in b.eval(
        "document.querySelector('#exp-lr_sweep + p').innerText"
    )
    for url, ready in [(f"{base}/", "document.querySelector('#count')"), (f"{base}/run/train-L2", "document.querySelector('.chart')"),
                       (f"{base}/compare?runs=train-L2,lr-ok", "document.querySelector('table.diff')"),
                       (f"{base}/sql?q=SELECT+run_id,status+FROM+runs", "document.querySelector('table.sql')")]:  # fmt: skip
        b.open(url, ready)
        links |= set(b.links())
    b.shot("dashboard_sql")
    pages = {link.partition("#")[0] for link in links}
    assert all(p.startswith(base) for p in pages), f"a link leaves the dashboard: {sorted(pages)}"
    with ThreadPoolExecutor(4) as pool:
        got = dict(zip(sorted(pages), pool.map(_get, sorted(pages))))
    for link in sorted(links):
        page, _, anchor = link.partition("#")
        code, body = got[page]
        assert code == 200, (link, code, body[:300])
        if anchor:
            assert f"id='{anchor}'" in body or f'id="{anchor}"' in body, f"{link}: no #{anchor} on the page"
    assert len(pages) >= 12, sorted(pages)


def test_a_live_run_adds_points_in_the_browser(lab):
    "A real `marin train` run, RUNNING: its page's loss chart gains points while the page stays open."
    b, base, train = lab["browser"], lab["base"], lab["train"]
    deadline, run = time.time() + 120, None
    while run is None and time.time() < deadline:
        assert train.poll() is None, train.stdout.read()
        rows = json.loads(_get(base + "/api/runs?status=RUNNING&family=train")[1])["rows"]
        run = rows[0]["run_id"] if rows else time.sleep(0.3)
    assert run, "the training run never showed up RUNNING in the ledger"
    b.open(f"{base}/run/{run}", "document.querySelector('#live')", timeout=60)
    first = int(
        b.wait("Number(document.querySelector('.chart[data-chart=\"loss\"]')?.dataset.points)", 90, "first points")
    )
    later = b.wait(f"Number(document.querySelector('.chart[data-chart=\"loss\"]').dataset.points) > {first} && "
                   "document.querySelector('.chart[data-chart=\"loss\"]').dataset.points", 60, "more points")  # fmt: skip
    assert int(later) > first and int(b.eval("Number(document.querySelector('#charts').dataset.polls)")) >= 2
    assert b.eval("document.querySelector('#charts').dataset.status") == "RUNNING"
    b.shot("dashboard_live_run")
    train.send_signal(signal.SIGTERM)  # done with it: its CPU back to the suite
