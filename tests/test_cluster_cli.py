"`marin cluster up` starts a real loopback Ray cluster with its own token; `marin cluster status` reads it; Ctrl-C stops it."
import json, os, signal, socket, subprocess, sys, time
from pathlib import Path
import pytest

MARIN = str(Path(sys.executable).with_name("marin"))

def test_cluster_up_status_and_stop(tmp_path):
    home = tmp_path / "home"; (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text("a-stray-token-the-cluster-must-ignore")
    env = {**os.environ, "HOME": str(home), "JAX_PLATFORMS": "cpu"}
    for k in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_TOKEN"): env.pop(k, None)
    up = subprocess.Popen([MARIN, "cluster", "up", "--nodes", "1", "--cpus", "1", "--resource", "device=1", "--root", str(tmp_path / "c")],
                          stdout=subprocess.PIPE, stderr=open(tmp_path / "up.err", "w"), text=True, env=env, start_new_session=True)
    try:
        exports = {}
        t = time.time()
        while len(exports) < 3 and time.time() - t < 400:
            line = up.stdout.readline()
            if not line:
                assert up.poll() is None, f"marin cluster up exited: {(tmp_path / 'up.err').read_text()[-2000:]}"
                continue
            if line.startswith("export "): k, v = line[7:].strip().split("=", 1); exports[k] = v
        assert set(exports) == {"RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH"}, exports
        token = Path(exports["RAY_AUTH_TOKEN_PATH"])
        assert token.is_file() and oct(token.stat().st_mode & 0o777) == "0o600"
        assert token.read_text() not in json.dumps(exports)                    # the token's place is printed, never the token

        st = subprocess.run([MARIN, "cluster", "status", "--json"], env={**env, **exports}, capture_output=True, text=True, timeout=120)
        assert st.returncode == 0, st.stderr[-2000:]
        s = json.loads(st.stdout)
        workers = [n for n in s["nodes"] if n["labels"].get("marin-node") == "node0"]
        assert len(workers) == 1 and workers[0]["alive"] and workers[0]["resources"]["device"] == 1 and workers[0]["resources"]["CPU"] == 1
        assert s["total"]["device"] == 1 and s["total"]["CPU"] == 1                 # the head does no work

        up.send_signal(signal.SIGINT)
        assert up.wait(timeout=120) == 0
        assert "cluster stopped" in (tmp_path / "up.err").read_text()
        host, port = exports["RAY_ADDRESS"].rsplit(":", 1)
        with pytest.raises(OSError): socket.create_connection((host, int(port)), timeout=2).close()   # the head is gone
    finally:
        if up.poll() is None: os.killpg(up.pid, signal.SIGKILL)
