"Shared test setup: offline tracking, CPU JAX, and a private storage prefix and reports dir per test."
import os, sys
from pathlib import Path
import pytest

os.environ["WANDB_MODE"] = "offline"
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("WANDB_SILENT", "true")

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

@pytest.fixture
def lab(tmp_path, monkeypatch):
    "A private lab: MARIN_PREFIX and MARIN_REPORTS_DIR under tmp_path; returns tmp_path."
    monkeypatch.setenv("MARIN_PREFIX", str(tmp_path / "store"))
    monkeypatch.setenv("MARIN_REPORTS_DIR", str(tmp_path / "reports"))
    monkeypatch.setenv("MARIN_LEASE_SECONDS", "3")
    return tmp_path

def marin_cmd(*args: str) -> list[str]:
    "The `marin` command of this environment."
    return [str(BIN / "marin"), *args]
