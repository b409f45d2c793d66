"The `marin` command: help everywhere, settings with sources, one-line errors, JupyterLab on loopback."

import json, os, socket, subprocess, time, urllib.request
import pytest
from conftest import marin_cmd, REPO


def run(*args, env=None, cwd=REPO):
    return subprocess.run(marin_cmd(*args), capture_output=True, text=True, env=env or os.environ, cwd=cwd, timeout=120)


@pytest.mark.parametrize(
    "cmd",
    [
        [],
        ["settings"],
        ["run"],
        ["runs"],
        ["runs", "list"],
        ["runs", "show"],
        ["runs", "sql"],
        ["runs", "doctor"],
        ["runs", "compare"],
        ["sft"],
        ["dpo"],
        ["grpo"],
        ["report"],
        ["report", "build"],
        ["lab"],
        ["dashboard"],
    ],
)
def test_help_on_every_command(cmd):
    r = run(*cmd, "--help")
    assert r.returncode == 0 and "Usage" in r.stdout, (cmd, r.stderr)


def test_settings_show_value_and_source(lab):
    r = run("settings")
    assert r.returncode == 0
    line = next(l for l in r.stdout.splitlines() if l.startswith("prefix"))
    assert str(lab / "store") in line and "env MARIN_PREFIX" in line
    line = next(l for l in r.stdout.splitlines() if l.startswith("tracker"))
    assert "offline" in line and "settings.ini" in line


def test_user_errors_are_one_line_exit_2(lab):
    for args, needle in [
        (["run", "experiments_nb/does_not_exist.ipynb"], "experiment not found"),
        (["runs", "show", "no-such-run"], "no run with id"),
        (["runs", "list", "--kind", "bogus"], "--kind"),
        (
            ["run", str(REPO / "experiments_nb" / "quickstart.ipynb"), "-p", "train_stepz", "3"],
            "unknown parameter(s) train_stepz",
        ),
        (["run", str(REPO / "experiments_nb" / "quickstart.ipynb"), "-p", "train_steps", "many"], "train_steps='many'"),
    ]:
        r = run(*args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1 and needle in r.stderr, r.stderr


def test_bad_setting_is_reported(lab, monkeypatch):
    r = run("settings", env=dict(os.environ, MARIN_TRACKER="sometimes"))
    assert r.returncode == 2 and "tracker" in r.stderr and "offline" in r.stderr


def test_lab_serves_on_loopback(lab):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(lab / "rt"), JUPYTER_CONFIG_DIR=str(lab / "cfg"))
    p = subprocess.Popen(
        marin_cmd("lab", "--port", str(port), "--no-browser"),
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        t0, body = time.time(), None
        while time.time() - t0 < 90 and body is None:
            try:
                body = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/api", timeout=2).read())
            except OSError:
                time.sleep(0.5)
        assert body and "version" in body, "JupyterLab did not answer on 127.0.0.1"
    finally:
        p.terminate()
        p.wait(timeout=30)
    with pytest.raises(OSError):  # terminating `marin lab` stopped the server too (no orphaned JupyterLab)
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
