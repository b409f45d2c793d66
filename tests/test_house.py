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
# No exported cell may pass EXPORT_CELL_LINES non-blank lines, except those below, each held to the size it has now
# (split one and take it off the list: the list only shrinks). Keyed "notebook:first name the cell defines".
EXPORT_CELL_LINES = 40
LONG_EXPORT_CELLS = {
    "00_config.ipynb:_CANON_SPECIAL_FLOATS": 53,
    "00_config.ipynb:canonical": 67,
    "01_settings.ipynb:SETTINGS": 60,
    "04_executor.ipynb:Step": 42,
    "06_reports.ipynb:_HEADER": 51,
    "06_reports.ipynb:build_site": 43,
    "06a_dashboard.ipynb:_routes": 44,
    "06a_dashboard.ipynb:runs_table": 41,
    "07_experiments.ipynb:run_experiment": 63,
    "10_sources.ipynb:SourceConfig": 50,
    "10_sources.ipynb:_FASTA_EXTS": 64,
    "10_sources.ipynb:_ZstdFrames": 64,
    "10_sources.ipynb:_by_reason": 45,
    "10_sources.ipynb:_decoded_lines": 65,
    "10_sources.ipynb:_is_text_type": 61,
    "10_sources.ipynb:_replaced": 48,
    "10_sources.ipynb:open_stream": 61,
    "10_sources.ipynb:shard_name": 46,
    "10_sources.ipynb:source_units": 43,
    "10a_catalog.ipynb:CatalogImportConfig": 41,
    "10a_catalog.ipynb:CatalogSubset": 48,
    "10a_catalog.ipynb:_DOLMA_PARTS": 41,
    "10a_catalog.ipynb:_index_paths": 46,
    "12a_fasttext.ipynb:_TRAIN": 41,
    "14_tokenizers.ipynb:leading_special_id": 47,
    "15_shards.ipynb:CorruptShardError": 69,
    "17_sample.ipynb:audio_record": 42,
    "19b_cli.ipynb:_IMPORT_FLAGS": 46,
    "20_transformer.ipynb:REMAT_POLICIES": 45,
    "20_transformer.ipynb:ROPE_SCALINGS": 69,
    "20_transformer.ipynb:_pick_token": 42,
    "20_transformer.ipynb:next_token_loss": 41,
    "20_transformer.ipynb:params_per_layer": 47,
    "20_transformer.ipynb:to_compute_dtype": 91,
    "20_transformer.ipynb:validate": 68,
    "20a_layers.ipynb:at_least_f32": 54,
    "20a_layers.ipynb:softcap": 43,
    "20a_layers.ipynb:splash_unsupported": 42,
    "21_moe.ipynb:GROUPED_MATMUL_AUTO": 52,
    "21_moe.ipynb:MoEConfig": 91,
    "21_moe.ipynb:MoEMLP": 45,
    "21_moe.ipynb:Routing": 52,
    "21_moe.ipynb:aux_free_bias": 44,
    "21_moe.ipynb:moe_mlp": 44,
    "22_moe_kernels.ipynb:_combine_prefetch": 52,
    "22_moe_kernels.ipynb:_gather_prefetch": 42,
    "23_moe_parallel.ipynb:_check_node_groups": 62,
    "23_moe_parallel.ipynb:_traffic": 98,
    "25_hf_models.ipynb:ARCHITECTURES": 62,
    "25_hf_models.ipynb:FLOAT_DTYPES": 49,
    "25_hf_models.ipynb:HF_WHOLE_FIELDS": 69,
    "25_hf_models.ipynb:_LAYER": 73,
    "25_hf_models.ipynb:_getter": 56,
    "25_hf_models.ipynb:_sliding_window": 52,
    "25_hf_models.ipynb:architecture_for": 58,
    "25_hf_models.ipynb:dense_hf_config": 47,
    "25_hf_models.ipynb:mixtral_problems": 60,
    "25_hf_models.ipynb:mixtral_refusal": 49,
    "26_import.ipynb:check_tokenizer_file": 58,
    "26b_chat_templates.ipynb:GEMMA3_CHAT_TEMPLATE": 64,
    "27_gguf.ipynb:_CONTRACTIONS": 187,
    "27_gguf.ipynb:_GGUF_SCALARS": 110,
    "27_gguf.ipynb:_post_processor": 44,
    "27_gguf.ipynb:check_gguf_layout": 65,
    "27_gguf.ipynb:gguf_config": 41,
    "30_optim.ipynb:SCHEDULES": 44,
    "31_sharding.ipynb:MeshConfig": 58,
    "31_sharding.ipynb:ShardingError": 97,
    "33_trainer.ipynb:CharDataConfig": 43,
    "33_trainer.ipynb:Evaluator": 43,
    "33_trainer.ipynb:TrainConfig": 65,
    "33_trainer.ipynb:TrainHooks": 66,
    "33_trainer.ipynb:TrainingSetup": 54,
    "33_trainer.ipynb:batch_targets": 42,
    "33_trainer.ipynb:checkpoint_meta": 52,
    "33_trainer.ipynb:cpu_threads": 43,
    "33_trainer.ipynb:train": 50,
    "34_train_cli.ipynb:_prompt_ids": 54,
    "34_train_cli.ipynb:_run_train": 53,
    "35_slice_compile.ipynb:SliceCompile": 49,
    "35_slice_compile.ipynb:SliceTarget": 46,
    "35_slice_compile.ipynb:_MeshShape": 46,
    "35_slice_compile.ipynb:_UNITS": 65,
    "35_slice_compile.ipynb:_residual_bytes_per_token": 64,
    "41_recipe.ipynb:optimizer_for": 46,
    "43_fits.ipynb:backtest_forecasts": 44,
    "44_scaling_cli.ipynb:accelerator_train_config": 59,
    "44_scaling_cli.ipynb:scale_cmd": 79,
    "50_perplexity.ipynb:HeldOutLoader": 41,
    "50_perplexity.ipynb:_LOGITS_JIT": 55,
    "51_tasks.ipynb:_batches": 59,
    "51_tasks.ipynb:evaluate_multiple_choice": 49,
    "56_dpo.ipynb:run_dpo": 49,
    "57_bio.ipynb:MarkovModel": 46,
    "57a_grpo.ipynb:grpo_train": 51,
    "57a_grpo.ipynb:run_grpo": 50,
    "58_post_cli.ipynb:_BASE_HELP": 63,
    "58_post_cli.ipynb:dpo_cmd": 62,
    "58_post_cli.ipynb:grpo_cmd": 59,
    "60_hf.ipynb:_same_or_nested": 52,
    "60_hf.ipynb:char_level_tokenizer_json": 42,
    "60_hf.ipynb:export_hf": 46,
    "60_hf.ipynb:from __future__ import annotations": 56,
    "63_engine.ipynb:Engine": 64,
    "63_engine.ipynb:_ensure_thread": 41,
    "64_server.ipynb:DEFAULT_CHAT_TEMPLATE": 43,
    "64_server.ipynb:GENERATE_ROUTES": 42,
    "64_server.ipynb:MAX_TEMPLATE_BYTES": 50,
    "64_server.ipynb:ServedModel": 71,
    "64_server.ipynb:_Guard": 46,
    "64_server.ipynb:_gguf_header": 42,
    "65_serve_cli.ipynb:serve_cmd": 82,
    "71_cluster_ray.ipynb:record_lost_attempt": 41,
    "90_cli.ipynb:LAYER_COMMANDS": 49,
    "90_cli.ipynb:_compare_text": 51,
    "90_cli.ipynb:run_cmd": 71,
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
    assert not shrunk, (
        "these cells are short now: take them off LONG_EXPORT_CELLS in tests/test_house.py:\n" + "\n".join(shrunk)
    )


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
    assert private_server_uses("import uvicorn\nc = uvicorn.Config(app, http='h11')\nuvicorn.config.LOGGING_CONFIG") == []
    bad = {f.name: private_server_uses(f.read_text()) for f in sorted((ROOT / "marin" / "serve").glob("*.py"))}
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, f"marin/serve reaches into uvicorn/starlette internals (use Config settings, ASGI middleware): {bad}"
