"""The hostile-input replay harness (issue #49): cases of the `marin` command, replayed in a child process, each in a
folder of its own, bounded in time and memory.

A test file lists its `CASES` (a `Case` each) and asks the `replayed` fixture (tests/conftest.py) to check them:

    CASES = [Case("hf-config/layers-1e9", argv=("import", "{d}/model"), make=write_model, says=("num_hidden_layers",))]

    @pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
    def test_replay(case, replayed):
        replayed.check(case)

All cases of a file run once, one after another, in one child (`python tests/replay.py FILE`: importing JAX, torch or
Ray once, not once per case), through `marin.cli.main`, the `marin` script's own entry point with its real error
handler. Each case gets:
- its folder `d` (the text "{d}" in `argv` and `env` values is replaced by it), its own `MARIN_PREFIX` (`d/store`) and
  `MARIN_REPORTS_DIR` (`d/reports`), and `d` as the working directory; `make(d)` writes its inputs first;
- a wall-clock bound (`seconds`: SIGALRM raises `ReplayTimeout`, a BaseException no `except Exception` swallows) and a
  memory bound: the child's address space is capped (`RLIMIT_AS`, `ADDRESS_SPACE_GB`), so a case that would eat the
  machine's memory meets a MemoryError instead, and each case's own peak resident memory (VmHWM, reset before each
  case) must stay under `max_rss_mb`.

What `check` asserts, for every case: the exit code is `code` (an `expect="ok"` case: 0); every text of `says` is in
the output; no "Traceback" in it (a user's error is one line, never a stack); the case stayed in its bounds; no step
under its prefix was left RUNNING; and the case's own `check(d, output)` passes.
"""

from __future__ import annotations

import contextlib, importlib.util, io, json, os, resource, signal, sys, time, traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ADDRESS_SPACE_GB = 12  # the child's whole virtual address space (JAX on CPU needs ~2 GB of it to start)


@dataclass(frozen=True)
class Case:
    "One hostile input and what must come of it."

    name: str  # class/what, unique in its file: "gguf/truncated-header"
    argv: tuple[str, ...]  # `marin ARGS`; "{d}" is the case's folder
    make: Callable[[Path], None] | None = (
        None  # writes the case's inputs into its folder (module level: the child imports it)
    )
    code: int | tuple[int, ...] = (1, 2)  # the exit codes that are right
    says: tuple[str, ...] = ()  # texts that must all appear in stdout + stderr (the file, the field, the fix)
    env: dict = field(default_factory=dict)  # extra environment ("{d}" replaced)
    seconds: float = 60  # wall-clock bound
    max_rss_mb: float = 3000  # bound on the case's own peak resident memory
    check: Callable[[Path, str], None] | None = None  # extra assertions on the folder and the output after the run
    expect: str = "error"  # "error" (a clear refusal) or "ok" (a correct result: exit code 0)

    def __post_init__(self):
        if self.expect not in ("error", "ok"):
            raise ValueError(f"Case {self.name}: expect must be 'error' or 'ok', not {self.expect!r}")

    @property
    def codes(self) -> tuple[int, ...]:
        if self.expect == "ok":
            return (0,)
        return (self.code,) if isinstance(self.code, int) else tuple(self.code)


def bytes_file(path: Path, data: bytes) -> Path:
    "Write `data` to `path` (parents made); returns the path."
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def json_file(path: Path, obj) -> Path:
    "Write `obj` as JSON to `path` (parents made); returns the path."
    return bytes_file(path, json.dumps(obj).encode())


class ReplayTimeout(BaseException):
    "A case ran past its `seconds`."


def _on_alarm(signum, frame):
    raise ReplayTimeout()


def _reset_peak_rss() -> None:
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current resident size


def _peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _base_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def running_steps(store: Path) -> list[str]:
    "The step folders under `store` whose status file says RUNNING."
    found = []
    for status in store.rglob(".executor_status.json") if store.exists() else ():
        with contextlib.suppress(OSError, ValueError):
            if json.loads(status.read_text()).get("status") == "RUNNING":
                found.append(str(status.parent.relative_to(store)))
    return found


def _fill(text: str, d: Path) -> str:
    return text.replace("{d}", str(d))


def run_case(case: Case, d: Path) -> dict:
    "Replay `case` in folder `d` in this process: its result as a dict (exit code, output, bounds, steps left RUNNING)."
    from marin.cli import main

    d.mkdir(parents=True, exist_ok=True)
    env = {"MARIN_PREFIX": str(d / "store"), "MARIN_REPORTS_DIR": str(d / "reports"), "MARIN_LEASE_SECONDS": "3"}
    env.update({k: _fill(v, d) for k, v in case.env.items()})
    saved_env = {k: os.environ.get(k) for k in env}
    saved_cwd, saved_argv, saved_showwarning = os.getcwd(), sys.argv, __import__("warnings").showwarning
    out, err = io.StringIO(), io.StringIO()
    result = dict(name=case.name, code=None, crash=None, timeout=False)
    try:
        if case.make is not None:
            case.make(d)
        os.environ.update(env)
        os.chdir(d)
        sys.argv = ["marin", *(_fill(a, d) for a in case.argv)]
        _reset_peak_rss()
        base_mb = _base_rss_mb()
        signal.signal(signal.SIGALRM, _on_alarm)
        signal.setitimer(signal.ITIMER_REAL, case.seconds)
        start = time.perf_counter()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                main()
            result["code"] = 0
        except SystemExit as e:
            result["code"] = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if isinstance(e.code, str):
                err.write(e.code)
        except ReplayTimeout:
            result["timeout"] = True
        except BaseException as e:  # a bug: the traceback is what the user would have seen
            result["crash"] = "".join(traceback.format_exception(e))
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        result["seconds"] = time.perf_counter() - start
        result["rss_mb"] = _peak_rss_mb() - base_mb
    except BaseException as e:
        result["crash"] = "the case's own set-up failed: " + "".join(traceback.format_exception(e))
    finally:
        os.chdir(saved_cwd)
        sys.argv = saved_argv
        __import__("warnings").showwarning = saved_showwarning
        for k, v in saved_env.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    result["output"] = out.getvalue() + err.getvalue()
    result["running"] = running_steps(d / "store")
    return result


def load_cases(test_file: str) -> list[Case]:
    "The `CASES` of a test file, imported as the module `replay_cases`."
    spec = importlib.util.spec_from_file_location("replay_cases", test_file)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["replay_cases"] = mod
    spec.loader.exec_module(mod)
    return mod.CASES


def replay_file(test_file: str, workdir: str, results: str) -> None:
    "Replay every case of `test_file` (folders under `workdir`), one JSON line per case appended to `results`."
    cases = load_cases(test_file)
    names = [c.name for c in cases]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SystemExit(f"{test_file}: case names must be unique: {dupes}")
    for i, case in enumerate(cases):
        r = run_case(case, Path(workdir) / f"{i:03d}")
        with open(results, "a") as f:
            f.write(json.dumps(r) + "\n")


class Replayed:
    "The results of one test file's cases (from the child), and the one check every case gets."

    def __init__(self, results: dict[str, dict], workdir: Path, cases: list[Case], child_output: str):
        self.results, self.workdir, self.child_output = results, workdir, child_output
        self.folders = {c.name: workdir / f"{i:03d}" for i, c in enumerate(cases)}

    def check(self, case: Case) -> None:
        r = self.results.get(case.name)
        assert r is not None, (
            f"{case.name}: no result: the replay child stopped before it:\n{self.child_output[-4000:]}"
        )
        out = r["output"]
        where = f"{case.name} (`marin {' '.join(case.argv)}`):\n{out[-3000:]}"
        assert r["crash"] is None, f"{where}\ncrashed:\n{r['crash']}"
        assert not r["timeout"], f"{where}\nran past its {case.seconds} s"
        assert r["code"] in case.codes, f"{where}\nexit code {r['code']}, expected {case.codes}"
        assert "Traceback" not in out, where
        missing = [s for s in case.says if s not in out]
        assert not missing, f"{where}\ndoes not say {missing}"
        assert r["rss_mb"] <= case.max_rss_mb, f"{where}\npeak memory {r['rss_mb']:.0f} MB > {case.max_rss_mb} MB"
        assert not r["running"], f"{where}\nleft steps RUNNING: {r['running']}"
        if case.check is not None:
            case.check(self.folders[case.name], out)


if __name__ == "__main__":  # python tests/replay.py TEST_FILE WORKDIR RESULTS
    sys.path.insert(0, str(Path(__file__).parent))
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_GB << 30, ADDRESS_SPACE_GB << 30))
    import replay  # this file as the module the test files import (one `Case` class, not __main__'s copy)

    replay.replay_file(*sys.argv[1:4])
