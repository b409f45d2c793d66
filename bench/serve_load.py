"""HTTP load on `marin serve` (issue #19): 64 concurrent completions against the FastAPI + uvicorn server, with p50 /
p99 latency, failures and throughput; then the same 64 while hostile requests are in flight (a 15 MB prompt, an
abandoned fan-out of 128 sequences, 100 half-open connections), with /health probed every 50 ms.

Run: .venv/bin/python bench/serve_load.py [--requests 64] [--new-tokens 16] [--max-batch 8]
     [--old-server /tmp/old_server.py]   # e.g. `git show 8cfc82d:marin/serve/server.py > /tmp/old_server.py`
The model is a random character-level Llama (4 layers, d_model 128, context 256) exported to a temporary folder;
the server runs in its own process (as `marin serve` does), and every request is forced to exactly --new-tokens tokens (ignore_eos). With --old-server, the previous
ThreadingHTTPServer implementation (loaded as a module beside the engine) serves the same model for the plain run,
side by side. Prints the machine's load average before and after."""

import argparse, concurrent.futures as cf, importlib.util, json, os, socket, subprocess, sys, tempfile, threading, time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
import httpx, jax, numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("--requests", type=int, default=64)
ap.add_argument("--new-tokens", type=int, default=16)
ap.add_argument("--max-batch", type=int, default=8)
ap.add_argument("--old-server", default="", help="a copy of the old marin/serve/server.py to compare with")
ap.add_argument("--serve", default="", help=argparse.SUPPRESS)  # internal: serve `new` or an old server file
ap.add_argument("--folder", default="", help=argparse.SUPPRESS)
ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
args = ap.parse_args()

from marin.models.transformer import LlamaConfig, init
from marin.serve.hf import export_hf
from marin.serve import server as new_server

VOCAB = ["\n"] + [chr(c) for c in range(32, 127)]
cfg = LlamaConfig(vocab_size=96, seq_len=256, d_model=128, n_layers=4, n_heads=4, n_kv_heads=2, d_ff=256)
folder = args.folder or os.path.join(tempfile.mkdtemp(), "load-llama")
if not args.serve:
    export_hf(init(cfg, key=jax.random.PRNGKey(0)), folder, tokenizer=VOCAB)
BODY = {"prompt": "To be, or not to be, that is the question", "max_tokens": args.new_tokens, "ignore_eos": True}


def load_old(path):
    spec = importlib.util.spec_from_file_location("marin.serve._old_server", path)
    mod = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # its relative imports resolve inside marin.serve
    return mod


def pct(xs, q):
    return float(np.percentile(np.asarray(xs) * 1000, q))


def concurrent_run(base: str, n: int) -> dict:
    "n requests at once from n threads: latencies, failures, completion tokens/s."
    client = httpx.Client(base_url=base, timeout=120, limits=httpx.Limits(max_connections=n + 8))

    def one(_):
        t0 = time.perf_counter()
        try:
            r = client.post("/v1/completions", json=BODY)
            ok = r.status_code == 200 and r.json()["usage"]["completion_tokens"] == args.new_tokens
        except httpx.HTTPError:
            ok = False
        return ok, time.perf_counter() - t0

    t0 = time.perf_counter()
    with cf.ThreadPoolExecutor(n) as pool:
        res = list(pool.map(one, range(n)))
    wall = time.perf_counter() - t0
    lat = [dt for _, dt in res]
    return {
        "p50": pct(lat, 50),
        "p99": pct(lat, 99),
        "fail": sum(not ok for ok, _ in res),
        "wall": wall,
        "tok_s": n * args.new_tokens / wall,
    }


def hostile(port: int, stop: threading.Event) -> dict:
    "A 15 MB prompt, an abandoned fan-out and 100 half-open connections, while /health is probed every 50 ms."
    out = {"health": []}
    half_open = [socket.create_connection(("127.0.0.1", port)) for _ in range(100)]
    for sk in half_open:
        sk.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
    fan = json.dumps({"prompt": ["Once upon a time"] * 8, "n": 16, "max_tokens": 200, "ignore_eos": True}).encode()
    fan_out = socket.create_connection(("127.0.0.1", port))
    fan_out.sendall(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(fan)}\r\n\r\n".encode()
        + fan
    )

    def big():
        r = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json={"prompt": "x" * 15_000_000}, timeout=120)
        out["big"] = (r.status_code, r.elapsed.total_seconds())

    th = threading.Thread(target=big)
    th.start()
    t_hang = time.perf_counter() + 0.5
    while not stop.is_set():
        t0 = time.perf_counter()
        try:
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=10)
            out["health"].append(time.perf_counter() - t0)
        except httpx.HTTPError:
            out["health"].append(10.0)
        if fan_out is not None and time.perf_counter() > t_hang:
            fan_out.close()  # the fan-out's client hangs up
            fan_out = None
        time.sleep(0.05)
    th.join()
    for sk in half_open:
        sk.close()
    return out


if args.serve:  # the server process: the client below would otherwise share its interpreter (and GIL)
    mod = new_server if args.serve == "new" else load_old(args.serve)
    mod.Server(mod.ServedModel.load(folder, max_batch=args.max_batch), port=args.port).serve_forever()
    sys.exit(0)


def serve(which: str):
    "A server process for `which` (new, or an old server file) on a free port, once /health answers."
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [
        sys.executable,
        __file__,
        "--serve",
        which,
        "--folder",
        folder,
        "--port",
        str(port),
        "--max-batch",
        str(args.max_batch),
    ]
    proc = subprocess.Popen(cmd)
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
            return proc, port
        except httpx.HTTPError:
            assert proc.poll() is None, "the server process exited"
            time.sleep(0.3)


print(f"load average before: {os.getloadavg()}; {os.cpu_count()} CPUs; python {sys.version.split()[0]}")
print(
    f"model: {cfg.n_params:,} params, {cfg.n_layers} layers, d_model {cfg.d_model}, context {cfg.seq_len}; "
    f"max_batch {args.max_batch}; {args.requests} requests x {args.new_tokens} tokens"
)
rows = []
proc, port = serve("new")
base = f"http://127.0.0.1:{port}"


def warm_up(base: str):
    "Compile the prefill and decode shapes both runs use, so that no compile lands in a timed run."
    httpx.post(
        base + "/v1/completions", json={"prompt": "Once upon a time", "max_tokens": 60, "ignore_eos": True}, timeout=300
    )
    concurrent_run(base, 8)


warm_up(base)
plain = concurrent_run(base, args.requests)
rows.append(("fastapi+uvicorn", "none", plain, None))
stop = threading.Event()
h = {}
th = threading.Thread(target=lambda: h.update(hostile(port, stop)))
th.start()
time.sleep(0.3)
under = concurrent_run(base, args.requests)
stop.set()
th.join()
rows.append(("fastapi+uvicorn", "15 MB prompt + abandoned fan-out + 100 half-open", under, h))
after = concurrent_run(base, 8)  # the abandoned fan-out no longer holds the engine
proc.terminate()
proc.wait(30)
if args.old_server:
    oproc, oport = serve(os.path.abspath(args.old_server))
    obase = f"http://127.0.0.1:{oport}"
    warm_up(obase)
    rows.append(("old ThreadingHTTPServer", "none", concurrent_run(obase, args.requests), None))
    oproc.terminate()
    oproc.wait(30)

print("| server | hostile load | p50 ms | p99 ms | failures | completion tok/s | /health p50 / p99 / max ms |")
print("|---|---|---|---|---|---|---|")
for name, load, r, hh in rows:
    health = (
        f"{pct(hh['health'], 50):.1f} / {pct(hh['health'], 99):.1f} / {max(hh['health']) * 1000:.1f}"
        f" ({len(hh['health'])} probes)"
        if hh
        else "—"
    )
    print(
        f"| {name} | {load} | {r['p50']:.0f} | {r['p99']:.0f} | {r['fail']}/{args.requests} | {r['tok_s']:.0f} | {health} |"
    )
if h.get("big"):
    print(f"15 MB prompt: HTTP {h['big'][0]} after {h['big'][1] * 1000:.0f} ms")
print(f"8 requests right after the hostile run: p50 {after['p50']:.0f} ms, {after['fail']} failures")
if args.old_server:
    print(f"throughput new / old: {rows[0][2]['tok_s'] / rows[-1][2]['tok_s']:.2f}x")
print(f"load average after: {os.getloadavg()}")
