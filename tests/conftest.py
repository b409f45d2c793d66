"Shared test setup: offline tracking, CPU JAX, and a private storage prefix and reports dir per test."

import collections, contextlib, functools, os, shutil, subprocess, sys, time, urllib.request
from pathlib import Path
import pytest

os.environ["WANDB_MODE"] = "offline"
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # compiling for TPU on a CPU: no TPU to guard (Makefile)

# The tests' models are tiny, so XLA's compile time, not run time, dominates the suite: compile without LLVM's
# optimisation passes (same HLO, same fusions; the generated loops are not vectorised, so float32 sums can differ in
# their last bits from the default build's). About 3x faster compiles on CPU (a tiny Llama's jitted init: 5.2 s ->
# 1.7 s); the whole pytest run: 22 min -> 13 min on 2 cores. And with XLA's classic CPU emitters instead of its newer
# MLIR fusion emitters (the same fused HLO, emitted straight to LLVM IR): a third less compile time again (an 8-device
# MoE train step: 16 -> 10 CPU s; three MoE serving tests: 132 -> 88 CPU s). Subprocesses inherit it through the env;
# `make nbtest` passes the same flags to the notebooks' tests.
COMPILE_FAST_XLA_FLAGS = (
    "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true --xla_cpu_use_fusion_emitters=false"
)


def xla_flags(*extra: str) -> str:
    "XLA_FLAGS for a test's subprocess: the suite's compile-time flags plus `extra` (e.g. a simulated device count)."
    return " ".join([COMPILE_FAST_XLA_FLAGS, *extra])


if COMPILE_FAST_XLA_FLAGS not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = " ".join(filter(None, [os.environ.get("XLA_FLAGS", ""), COMPILE_FAST_XLA_FLAGS]))

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


# One child process for all of a test file's multi-device scripts: the device count is fixed when JAX starts, so they
# cannot run in the test process, but starting Python, JAX and marin again for each script (and loading the same
# compiled programs from the cache again) costs a few seconds a script. Each script runs in a fresh copy of the
# prelude's namespace and reports with `print("RESULT", json.dumps(...))`; a script that raises does not stop the next.
_SCRIPTS_CHILD = """
import json, sys, traceback
_prelude, _scripts = json.loads(sys.stdin.read())
_ns = {"__name__": "__main__"}
exec(compile(_prelude, "<prelude>", "exec"), _ns)
for _name, _body in _scripts.items():
    print("SCRIPT", _name, flush=True)
    try:
        exec(compile(_body, f"<{_name}>", "exec"), dict(_ns))
    except BaseException:
        print("ERROR", json.dumps(traceback.format_exc()), flush=True)
"""


class ScriptResults:
    "What `run_scripts` returns: `results[name]` is the dict a script printed after RESULT (asserting that it did)."

    def __init__(self, results: dict, errors: dict, output: str):
        self.results, self.errors, self.output = results, errors, output

    def __getitem__(self, name: str) -> dict:
        assert name not in self.errors, f"script {name} raised:\n{self.errors[name]}"
        assert name in self.results, f"script {name} printed no RESULT; the child's output:\n{self.output[-4000:]}"
        return self.results[name]


def run_scripts(scripts: dict[str, str], prelude: str = "", devices: int = 8, timeout: float = 900, env=None):
    "Run `scripts` (name -> Python source) one after another in one child with `devices` CPU devices."
    import json, textwrap

    env = dict(os.environ if env is None else env)
    env.update(XLA_FLAGS=xla_flags(f"--xla_force_host_platform_device_count={devices}"), JAX_PLATFORMS="cpu")
    payload = json.dumps([textwrap.dedent(prelude), {k: textwrap.dedent(v) for k, v in scripts.items()}])
    try:
        r = subprocess.run(
            [sys.executable, "-c", _SCRIPTS_CHILD],
            input=payload,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        stdout, output = r.stdout, r.stdout + r.stderr + f"\n(exit {r.returncode})"
    except subprocess.TimeoutExpired as e:
        stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        output = stdout + f"\nthe child ran past {timeout} s"
    results, errors, current = {}, {}, None
    for line in stdout.splitlines():
        if line.startswith("SCRIPT "):
            current = line[len("SCRIPT ") :]
        elif line.startswith("RESULT ") and current is not None:
            results[current] = json.loads(line[len("RESULT ") :])
        elif line.startswith("ERROR ") and current is not None:
            errors[current] = json.loads(line[len("ERROR ") :])
    return ScriptResults(results, errors, output)


# XLA's persistent compilation cache (the Makefile sets the same): the suite compiles the same tiny programs in many
# tests and processes; a cache hit returns the very executable a compile would, so results do not change.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(REPO / ".cache" / "jax"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.1")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
os.environ.setdefault("JAX_COMPILATION_CACHE_MAX_SIZE", str(2 * 10**9))  # least recently used entries go first

# `import ray` and `import nbformat` (papermill, nbconvert: every `marin run`) spend ~4 of their ~5 CPU s building the
# ~40 Earley parsers of jsonschema's non-GPL IRI checker, rfc3987-syntax, at import (python-jsonschema/jsonschema#1428;
# no schema here checks an IRI). This process, and through PYTHONPATH every process it starts (`marin` commands, their
# notebook kernels, Ray clusters' daemons and workers, scripts), get nbs/70_cluster_local's stand-in, which builds
# them the first time an IRI is checked: what jsonschema accepts does not change (that notebook's test shows it). The
# folder is under .cache/ (ignored by git), written atomically, so that both pytest workers can write it.
from marin.cluster.local import CLUSTER_SITECUSTOMIZE, defer_iri_parsers

defer_iri_parsers()
PYTHON_STARTUP = REPO / ".cache" / "python-startup"
if not (PYTHON_STARTUP / "sitecustomize.py").is_file() or (
    (PYTHON_STARTUP / "sitecustomize.py").read_text() != CLUSTER_SITECUSTOMIZE
):
    from marin.core import storage

    storage.write_text(str(PYTHON_STARTUP / "sitecustomize.py"), CLUSTER_SITECUSTOMIZE)
if str(PYTHON_STARTUP) not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PYTHON_STARTUP), os.environ.get("PYTHONPATH", "")]))

# `make test` runs the files on 2 pytest-xdist workers, one whole file per worker at a time (module fixtures such as a
# Ray cluster start once). xdist hands files out in order; by default it sorts them by their number of tests, which
# sent the single-test files (the Ray CLI test, the quickstart: minutes each) last, so one worker finished them while
# the other sat idle. Longest first instead (LPT): the files' rough seconds on 2 cores, from `--durations=0` (the sums of
# a whole run on a busy machine, 2026-12-07, scaled by the CPU seconds saved where a file was made cheaper since: only
# their order matters; a file not listed counts as short and keeps its alphabetical place).
FILE_SECONDS = {
    "test_cluster_ray.py": 200,
    "test_serve_hf.py": 175,
    "test_slice_compile.py": 105,
    "test_slice_memory.py": 115,
    "test_serve_moe.py": 105,
    "test_cluster_cli.py": 45,
    "test_moe_layer.py": 95,
    "test_train_sharding.py": 100,
    "test_core_experiments.py": 105,
    "test_serve_engine.py": 95,
    "test_scaling_fits.py": 95,
    "test_quickstart.py": 90,
    "test_moe_locality.py": 85,
    "test_serve_api.py": 80,
    "test_tpu_kernels.py": 80,
    "test_optimizers_train.py": 80,
    "test_models_transformer.py": 80,
    "test_data_scale.py": 40,
    "test_tpu_attention.py": 65,
    "test_moe_parallel.py": 65,
    "test_train_resume.py": 60,
    "test_cpu_kernels_portable.py": 55,
    "test_slice_targets.py": 50,
    "test_runs_terminal.py": 40,
    "test_core_cli.py": 45,
    "test_replay_runs.py": 40,
    "test_models_gguf.py": 40,
    "test_models_smollm2.py": 35,
    "test_catalog.py": 40,
    "test_dashboard.py": 30,
    "test_fasttext_quality.py": 20,
    "test_scale_emit.py": 30,
}


def pytest_collection_modifyitems(config, items):
    "Longest files first (with `--no-loadscope-reorder`, xdist keeps this order when it hands out whole files)."
    order = {id(it): i for i, it in enumerate(items)}
    items.sort(key=lambda it: (-FILE_SECONDS.get(Path(str(it.fspath)).name, 0), order[id(it)]))


def pytest_terminal_summary(terminalreporter):
    """Each test file's seconds (setup + call + teardown of its tests), the 30 largest: what FILE_SECONDS is tuned
    from. Under xdist the controller holds every worker's reports, so this prints there."""
    seconds = collections.Counter()
    for reports in terminalreporter.stats.values():
        for r in reports:
            if isinstance(getattr(r, "duration", None), float) and getattr(r, "nodeid", ""):
                seconds[r.nodeid.split("::")[0]] += r.duration
    if seconds:
        terminalreporter.write_sep("=", "seconds per test file (setup + call + teardown), top 30")
        for path, s in seconds.most_common(30):
            terminalreporter.write_line(f"{s:8.1f}s {path}")


@pytest.fixture
def lab(tmp_path, monkeypatch):
    "A private lab: MARIN_PREFIX and MARIN_REPORTS_DIR under tmp_path; returns tmp_path."
    monkeypatch.setenv("MARIN_PREFIX", str(tmp_path / "store"))
    monkeypatch.setenv("MARIN_REPORTS_DIR", str(tmp_path / "reports"))
    monkeypatch.setenv("MARIN_LEASE_SECONDS", "3")
    return tmp_path


def chromium() -> str:
    "Headless Chromium for the browser tests (report site, dashboard): Debian's package."
    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    assert exe, "headless Chromium is needed: `make chromium` installs Debian's chromium package"
    return exe


def marin_cmd(*args: str) -> list[str]:
    "The `marin` command of this environment."
    return [str(BIN / "marin"), *args]


@contextlib.contextmanager
def marin_server(model_dir, *args: str, timeout: float = 180):
    """`marin serve --model model_dir ARGS` as a real process on a free 127.0.0.1 port, once `/health` answers:
    yields (base URL, process); terminates it on exit."""
    from marin.cluster.local import free_port

    port = free_port()
    proc = subprocess.Popen(
        marin_cmd("serve", "--model", str(model_dir), "--port", str(port), *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=dict(os.environ, JAX_PLATFORMS="cpu"),
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + timeout
        while True:
            if proc.poll() is not None:
                pytest.fail(f"server exited: {proc.stdout.read()}")
            if time.time() > deadline:
                pytest.fail("server did not come up")
            try:
                with urllib.request.urlopen(base + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.3)
        yield base, proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def tiny_transformers_model(arch: str = "Llama", seed: int = 0, **config):
    """A 2-layer model of `transformers.{arch}ForCausalLM`, built offline from `{arch}Config` with random weights
    perturbed (N(0, 0.3) added to every parameter) so that every tensor matters; `config` overrides the shape."""
    import torch, transformers

    torch.manual_seed(seed)
    shape = dict(
        vocab_size=80,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
    )
    config_class = {"Gemma3": "Gemma3TextConfig"}.get(arch, f"{arch}Config")  # Gemma 3's text-only config
    hcfg = getattr(transformers, config_class)(**{**shape, **config})
    hf = getattr(transformers, f"{arch}ForCausalLM")(hcfg).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return hf


@pytest.fixture(scope="module")
def replayed(request, tmp_path_factory):
    """The module's `CASES` (tests/replay.py) replayed once in a child process; `.check(case)` asserts one of them.
    The child's whole run is bounded too: the sum of its cases' `seconds`, plus its start."""
    import json
    from replay import Replayed

    cases = request.module.CASES
    workdir = tmp_path_factory.mktemp("replay")
    results = workdir / "results.jsonl"
    cmd = [sys.executable, str(REPO / "tests" / "replay.py"), str(request.module.__file__), str(workdir), str(results)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=sum(c.seconds for c in cases) + 120)
        child_output = r.stdout + r.stderr + f"\n(exit {r.returncode})"
    except subprocess.TimeoutExpired as e:
        child_output = f"the replay child ran past its bound: {e}"
    lines = results.read_text().splitlines() if results.exists() else []
    return Replayed({(d := json.loads(line))["name"]: d for line in lines}, workdir, cases, child_output)


@functools.cache
def tpu_topology(name: str):
    "The abstract devices of a TPU topology (deviceless compilation), or a skip saying why libtpu cannot give them."
    try:
        from jax.experimental import topologies

        return topologies.get_topology_desc(platform="tpu", topology_name=name)
    except Exception as e:  # no libtpu, or one that cannot load here
        pytest.skip(f"deviceless TPU compilation needs libtpu (the tpu extra): {type(e).__name__}: {str(e)[:200]}")
