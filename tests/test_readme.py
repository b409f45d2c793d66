"README.md is the rendering of nbs/index.ipynb, and the files the design card names exist."

import subprocess, sys
from pathlib import Path
from conftest import REPO, BIN


def test_readme_is_index_notebook():
    out = subprocess.run(
        [
            str(BIN / "jupyter"),
            "nbconvert",
            "--to",
            "markdown",
            "--log-level=ERROR",
            "--stdout",
            str(REPO / "nbs" / "index.ipynb"),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert (REPO / "README.md").read_text() == out, "README.md is stale: run `make readme`"


def test_layout_of_the_design_card():
    for p in [
        "nbs",
        "marin",
        "settings.ini",
        "_quarto.yml",
        "experiments_nb",
        "reports",
        "tests",
        "pyproject.toml",
        "README.md",
        "LICENSE",
        "Makefile",
        ".ci/run",
        "bench",
        "BENCHMARKS.md",
        "uv.lock",
    ]:
        assert (REPO / p).exists(), f"{p} missing"
    assert "Apache License" in (REPO / "LICENSE").read_text()
    import tomllib

    cfg = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert (
        cfg["tool"]["nbdev"]["lib_path"] == "marin"
        and cfg["project"]["entry-points"]["nbdev"]["marin"] == "marin._modidx:d"
    )
