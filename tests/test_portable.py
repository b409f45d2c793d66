"""The lab installs on any machine: no tracked file names a path that exists only on one machine, the lock resolves
everything from the registry, and the main job's dependencies leave out the test-only comparison stack."""

import re, subprocess, sys, tomllib
from conftest import REPO

# Absolute paths of machines: home and build folders, local wheel folders, file:// URLs to them.
MACHINE_PATH = re.compile(r"(file://)?/(opt|root|home|Users|work|mnt|srv|scratch)/[A-Za-z0-9._-]+")
# What a machine path may legitimately look like in prose: none. What is exempt: executed reports (the record of a
# run on the machine it ran on, tracebacks included) and this file's own pattern.
EXEMPT_DIRS = ("reports/",)
COMPARISON_STACK = {"torch", "transformers", "accelerate", "lm-eval", "openai", "datasketch", "resiliparse"}


def tracked_files() -> list[str]:
    return subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()


def test_pattern_catches_a_local_wheel():
    "The check would have caught the path that stopped every install outside our machines."
    assert MACHINE_PATH.search(
        'torch = { path = "/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl" }'
    )
    assert MACHINE_PATH.search("file:///home/me/wheels/x.whl") and not MACHINE_PATH.search("https://pypi.org/simple")


def test_no_machine_path_in_tracked_files():
    hits = []
    for name in tracked_files():
        if name.startswith(EXEMPT_DIRS) or name == "tests/test_portable.py":
            continue
        path = REPO / name
        if not path.is_file():
            continue
        text = path.read_bytes().decode("utf-8", "replace")
        hits += [f"{name}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}" for m in MACHINE_PATH.finditer(text)]
    assert not hits, (
        "machine-specific absolute paths in tracked files (use the registry or a relative path):\n"
        + "\n".join(hits[:20])
    )


def lock() -> dict:
    return tomllib.loads((REPO / "uv.lock").read_text())


def test_lock_resolves_from_the_registry_only():
    "Every locked package comes from a package index or is the project itself: no local files or folders."
    project = ({"editable": "."}, {"virtual": "."})
    local = [
        f"{p['name']} {p['version']}: {p['source']}"
        for p in lock()["package"]
        if "registry" not in p["source"] and p["source"] not in project
    ]
    assert not local, f"packages locked from local paths: {local}"
    assert not tomllib.loads((REPO / "pyproject.toml").read_text()).get("tool", {}).get("uv", {}).get("sources"), (
        "[tool.uv.sources] pins a package to a local source: take it from the registry by version instead"
    )


def main_closure() -> set[str]:
    "Names of every package `uv sync --no-default-groups` installs: the project's own dependencies, transitively."
    pkgs = {p["name"]: p for p in lock()["package"]}
    todo, seen = [d["name"] for d in pkgs["marin"].get("dependencies", [])], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += [d["name"] for d in pkgs[name].get("dependencies", [])]
    return seen


def test_main_job_leaves_out_the_comparison_stack():
    closure = main_closure()
    assert {"jax", "equinox", "papermill", "pyarrow"} <= closure, "the closure walk lost the lab's own dependencies"
    assert not (COMPARISON_STACK & closure), (
        f"the main job would install test-only packages: {COMPARISON_STACK & closure}"
    )
    groups = tomllib.loads((REPO / "pyproject.toml").read_text())["dependency-groups"]
    torch_pins = [d for d in groups["compare"] if d.startswith("torch")]
    assert torch_pins and "==" in torch_pins[0], (
        "torch is taken from the registry by a pinned version in the `compare` group"
    )


def test_lab_imports_without_the_comparison_stack():
    "Every marin module imports with torch, transformers, lm-eval and the other comparison packages unimportable."
    blocked = sorted(m.replace("-", "_") for m in COMPARISON_STACK)
    code = f"""
import importlib, pkgutil, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {blocked!r}: raise ImportError(f'{{name}} is blocked: not part of the main job')
sys.meta_path.insert(0, Block())
import marin
mods = [m.name for m in pkgutil.walk_packages(marin.__path__, 'marin.')]
for m in mods: importlib.import_module(m)
print(len(mods))
"""
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert int(out.stdout.split()[-1]) > 20
