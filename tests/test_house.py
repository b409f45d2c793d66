"""The house rules that a reader would otherwise only find broken: no import cycles between the modules of `marin/`
(imports inside functions count: they are how cycles hide), dependencies that point down the layers of DESIGN.md,
and the notebooks, tests and benchmarks formatted by the one formatter (one statement per line, lines <= 120)."""

import ast, collections, json, pathlib, re, shutil, subprocess, sys, tomllib

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


# Notebooks in the fastcore manner: an exported cell is one idea of a few to ~30 lines with its test right after it.
# No exported cell may pass EXPORT_CELL_LINES non-blank lines, except those listed in tests/long_export_cells.txt, each
# held to the size it has there; split one and take it off the list (the list only shrinks).
EXPORT_CELL_LINES = 40
LONG_EXPORT_CELLS = {
    key: int(n)
    for key, n in (
        line.rsplit(" ", 1)
        for line in (ROOT / "tests" / "long_export_cells.txt").read_text().splitlines()
        if line[:1].isalnum()
    )
}


def export_cells() -> list[tuple[str, int]]:
    "('notebook:first name defined', non-blank lines) for every `#| export` cell of nbs/*.ipynb."
    out = []
    for nb in sorted((ROOT / "nbs").glob("*.ipynb")):
        for cell in json.loads(nb.read_text())["cells"]:
            src = "".join(cell["source"])
            if cell["cell_type"] != "code" or not re.search(r"^#\|\s*export\s*$", src, re.MULTILINE):
                continue
            m = re.search(r"^(?:async\s+)?(?:def|class)\s+(\w+)|^(\w+)\s*[:=]", src, re.MULTILINE)
            first = (m.group(1) or m.group(2)) if m else next(l for l in src.splitlines() if not l.startswith("#|"))
            out.append((f"{nb.name}:{first}", sum(1 for line in src.splitlines() if line.strip())))
    return out


def test_exported_cells_are_short():
    cells = export_cells()
    assert len(cells) > 500 and any(n > EXPORT_CELL_LINES for _, n in cells), "the notebooks' cells were not found"
    sizes = collections.defaultdict(int)
    for key, n in cells:
        sizes[key] = max(sizes[key], n)
    grown = [
        f"{key}: {n} lines (at most {LONG_EXPORT_CELLS.get(key, EXPORT_CELL_LINES)})"
        for key, n in sizes.items()
        if n > max(EXPORT_CELL_LINES, LONG_EXPORT_CELLS.get(key, 0))
    ]
    assert not grown, (
        f"exported cells over {EXPORT_CELL_LINES} non-blank lines: split each into cells of one idea (~30 lines), "
        "each followed by its test:\n" + "\n".join(grown)
    )
    shrunk = [key for key, n in LONG_EXPORT_CELLS.items() if sizes.get(key, 0) <= EXPORT_CELL_LINES]
    assert not shrunk, "these cells are short now: take them off tests/long_export_cells.txt:\n" + "\n".join(shrunk)


def test_non_python_files_in_the_package_are_package_data():
    "A file under marin/ that is not Python (the kernels' C++, the dashboard's front end) ships in the wheel."
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    shipped = {f for pkg, globs in data.items() for g in globs for f in ROOT.joinpath(*pkg.split(".")).glob(g)}
    missing = [
        str(f.relative_to(ROOT))
        for f in sorted((ROOT / "marin").rglob("*"))
        if f.is_file() and f.suffix not in (".py", ".pyc") and "__pycache__" not in f.parts and f not in shipped
    ]
    assert "marin/kernels/cpu_rowvec.cc" not in missing
    assert not missing, "add these to [tool.setuptools.package-data] in pyproject.toml:\n" + "\n".join(missing)


SERVER_PRIVATE = ("uvicorn.protocols", "uvicorn.lifespan", "uvicorn.loops", "uvicorn.supervisors")


def private_server_uses(src: str) -> list[str]:
    "Imports of (or dotted references to) uvicorn's and starlette's internals in `src`: what an upgrade may break."
    found = []
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Attribute):
            parts, n = [node.attr], node.value
            while isinstance(n, ast.Attribute):
                parts, n = [n.attr, *parts], n.value
            names = [".".join([n.id, *parts])] if isinstance(n, ast.Name) else []
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] in ("uvicorn", "starlette") and (
                name.startswith(SERVER_PRIVATE) or any(p.startswith("_") for p in parts[1:])
            ):
                found.append(f"line {node.lineno}: {name}")
    return found


def test_the_server_uses_public_uvicorn_and_starlette_only():
    assert private_server_uses("from uvicorn.protocols.http.h11_impl import H11Protocol") != []
    assert private_server_uses("import uvicorn\nx = uvicorn.protocols.http.h11_impl.H11Protocol") != []
    assert private_server_uses("from starlette._utils import is_async_callable\nfrom uvicorn import _types") != []
    assert (
        private_server_uses("import uvicorn\nc = uvicorn.Config(app, http='h11')\nuvicorn.config.LOGGING_CONFIG") == []
    )
    bad = {f.name: private_server_uses(f.read_text()) for f in sorted((ROOT / "marin" / "serve").glob("*.py"))}
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, (
        f"marin/serve reaches into uvicorn/starlette internals (use Config settings, ASGI middleware): {bad}"
    )
