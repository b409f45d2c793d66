"""The house rules that a reader would otherwise only find broken: no import cycles between the modules of `marin/`
(imports inside functions count: they are how cycles hide), dependencies that point down the layers of DESIGN.md,
and the notebooks, tests and benchmarks formatted by the one formatter (one statement per line, lines <= 120)."""

import ast, collections, pathlib, shutil, subprocess, sys

ROOT = pathlib.Path(__file__).resolve().parents[1]

# layer -> layers it must not import (DESIGN.md, "Layers"); `cli` is the top and may import anything
FORBIDDEN = {
    "core": {"data", "models", "kernels", "train", "scaling", "eval", "posttrain", "serve", "cluster", "cli"},
    "kernels": {"data", "models", "train", "scaling", "eval", "posttrain", "serve", "cluster", "cli"},
    "data": {"models", "kernels", "train", "scaling", "eval", "posttrain", "serve", "cluster", "cli"},
    "models": {"train", "scaling", "eval", "posttrain", "serve", "cluster", "cli"},
    "train": {"scaling", "eval", "posttrain", "serve", "cluster", "cli"},
    "eval": {"train", "scaling", "posttrain", "serve", "cluster", "cli"},
    "serve": {"train", "scaling", "eval", "posttrain", "cluster", "cli"},
    "posttrain": {"scaling", "eval", "serve", "cluster", "cli"},  # post-training runs the trainer: train is allowed
    "scaling": {"eval", "posttrain", "serve", "cluster", "cli"},  # a sweep runs the trainer: train is allowed
    "cluster": {"data", "models", "kernels", "train", "scaling", "eval", "posttrain", "serve", "cli"},
}


def module_files() -> dict[str, pathlib.Path]:
    out = {}
    for f in sorted((ROOT / "marin").rglob("*.py")):
        if f.name == "_modidx.py":
            continue
        parts = f.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def import_graph() -> dict[str, dict[str, int]]:
    "module -> {imported marin module: line of the first such import}, imports inside functions included."
    mods = module_files()
    graph: dict[str, dict[str, int]] = collections.defaultdict(dict)
    for name, f in mods.items():
        package = name if f.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for t in targets:
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != name and t.startswith("marin"):
                    graph[name].setdefault(t, node.lineno)
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    "Strongly connected components with more than one module (Tarjan)."
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in list(graph):
        if v not in index:
            visit(v)
    return found


def layer(module: str) -> str:
    parts = module.split(".")
    return "cli" if parts[1:] == ["cli"] else (parts[1] if len(parts) > 1 else "marin")


def test_graph_sees_imports_inside_functions():
    g = import_graph()
    # marin.train.sharding imports the model's axis table at module level, marin.models.moe the kernels
    assert "marin.models.transformer" in g["marin.train.sharding"]
    assert "marin.kernels.moe_dispatch" in g["marin.models.moe"]
    assert cycles({"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3}, "d": {"a": 4}}) == [["a", "b", "c"]]


def test_no_import_cycles():
    g = import_graph()
    found = cycles(g)
    where = [
        " -> ".join(f"{m} (line {g[m][n]})" for m, n in zip(c, c[1:] + c[:1]) if n in g[m]) or ", ".join(c)
        for c in found
    ]
    assert not found, "import cycles between marin modules (break them by moving the shared piece down):\n" + "\n".join(
        where
    )


def test_dependencies_point_down_the_layers():
    g = import_graph()
    upward = [
        f"{a}:{line} imports {b} ({layer(a)} may not import {layer(b)})"
        for a, deps in sorted(g.items())
        for b, line in sorted(deps.items())
        if layer(b) in FORBIDDEN.get(layer(a), set())
    ]
    assert not upward, "imports against the layers of DESIGN.md:\n" + "\n".join(upward)


def test_kernels_take_arrays_not_model_configs():
    src = "\n".join(f.read_text() for f in (ROOT / "marin" / "kernels").glob("*.py"))
    assert "Config" not in src, "marin/kernels takes arrays and integers; pass sizes, not configs"


def test_sources_are_formatted():
    ruff = shutil.which("ruff", path=str(pathlib.Path(sys.executable).parent)) or shutil.which("ruff")
    assert ruff, "ruff is in the dev dependency group: run `uv sync` (make venv-test)"
    r = subprocess.run([ruff, "format", "--check", "."], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, f"run `ruff format .` (then `make export`):\n{r.stdout[-3000:]}{r.stderr[-2000:]}"
