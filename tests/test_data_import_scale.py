"""The import stage at scale: many files packed into tasks give byte-identical shards with 1 and 2 worker processes;
compressed JSON Lines and gzipped web archives import through the executor; a big file streams in bounded memory."""

import gzip, json, pathlib, tracemalloc
import pyarrow.parquet as pq
import zstandard
from marin.core.executor import Executor
from marin.core.settings import shared_data_dir
from marin.data.sources import (
    SourceConfig,
    document_files,
    document_summary,
    import_documents,
    import_step,
    import_task,
    iter_documents,
    read_documents,
)


def _paragraphs(n: int) -> list[str]:
    text = (shared_data_dir() / "text" / "pride_and_prejudice.txt").read_text()
    paras = [p.strip() for p in text.split("\n\n") if len(p.strip()) > 40]
    return paras[:n]


def _many_files(root: pathlib.Path, n_files: int = 240) -> pathlib.Path:
    "A corpus of many small files in four formats (text, jsonl, jsonl.gz, jsonl.zst), in nested folders."
    paras = _paragraphs(3 * n_files)
    src = root / "corpus"
    for i in range(n_files):
        d = src / f"part{i % 7}"
        d.mkdir(parents=True, exist_ok=True)
        recs = "".join(json.dumps({"text": p, "n": i}) + "\n" for p in paras[3 * i : 3 * i + 3]).encode()
        kind = i % 4
        if kind == 0:
            (d / f"f{i:04d}.txt").write_text("\n\n".join(paras[3 * i : 3 * i + 3]))
        elif kind == 1:
            (d / f"f{i:04d}.jsonl").write_bytes(recs)
        elif kind == 2:
            (d / f"f{i:04d}.jsonl.gz").write_bytes(gzip.compress(recs))
        else:
            (d / f"f{i:04d}.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(recs))
    return src


def _shard_bytes(path: str) -> dict[str, bytes]:
    return {f.rsplit("/", 1)[-1]: pathlib.Path(f).read_bytes() for f in document_files(path)}


def test_many_files_one_and_two_workers_give_identical_bytes(tmp_path):
    src = _many_files(tmp_path)
    cfg = SourceConfig("many", (str(src),), split="paragraphs", task_bytes=4_000, shard_docs=5)
    m1 = import_documents(cfg.replace(workers=1), str(tmp_path / "w1"))
    m2 = import_documents(cfg.replace(workers=2), str(tmp_path / "w2"))
    b1, b2 = _shard_bytes(str(tmp_path / "w1")), _shard_bytes(str(tmp_path / "w2"))
    n_tasks = len({name.split("-")[1] for name in b1})
    assert n_tasks >= 20 and n_tasks < 240, n_tasks  # packed: many tasks, but far fewer than files
    assert any(name.endswith("-0001.parquet") for name in b1)  # some task rolled over to a second shard
    assert b1 == b2 and m1 == m2
    assert (tmp_path / "w1" / "summary.json").read_bytes() == (tmp_path / "w2" / "summary.json").read_bytes()
    # the shards in name order hold the documents in iter_documents' order, ids included
    want = [d["id"] for d in iter_documents(cfg)]
    assert [d["id"] for d in read_documents(str(tmp_path / "w2"))] == want and m1["data/documents"] == len(want)
    assert document_summary(str(tmp_path / "w2"))["by_source"]["many"]["documents"] == len(want)


def test_limit_keeps_the_first_documents_with_two_workers(tmp_path):
    src = _many_files(tmp_path, n_files=60)
    cfg = SourceConfig("lim", (str(src),), split="paragraphs", task_bytes=2_000, shard_docs=7, limit=50)
    m1 = import_documents(cfg.replace(workers=1), str(tmp_path / "w1"))
    m2 = import_documents(cfg.replace(workers=2), str(tmp_path / "w2"))
    want = [d["id"] for d in iter_documents(cfg)]
    assert len(want) == 50 and [d["id"] for d in read_documents(str(tmp_path / "w2"))] == want
    assert _shard_bytes(str(tmp_path / "w1")) == _shard_bytes(str(tmp_path / "w2")) and m1 == m2
    files = document_files(str(tmp_path / "w2"))
    assert m2["data/documents"] == 50 and document_summary(str(tmp_path / "w2"))["files"] == len(files)
    # the tasks wrote more shards than the limit needs (each stops at 50 documents); those past it are gone
    markers = [json.loads(f.read_text()) for f in sorted((tmp_path / "w2" / ".tasks" / "import").glob("*.json"))]
    assert sum(len(m["parts"]) for m in markers) > len(files) and sum(m["documents_in"] for m in markers) > 50


def _warc_response(uri: str, html: str, rid: str) -> bytes:
    body = html.encode()
    http = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
    )
    head = (
        f"WARC/1.0\r\nWARC-Type: response\r\nWARC-Record-ID: <urn:uuid:{rid}>\r\nWARC-Date: 2024-01-01T00:00:00Z\r\n"
        f"WARC-Target-URI: {uri}\r\nContent-Type: application/http; msgtype=response\r\n"
        f"Content-Length: {len(http) + len(body)}\r\n\r\n"
    )
    return head.encode() + http + body + b"\r\n\r\n"


def test_warc_gz_and_jsonl_zst_import_extract_and_langid(tmp_path):
    from marin.data.extract import ExtractConfig, extract_step
    from marin.data.langid import LangIdConfig, langid_step
    from marin.data.sources import read_attributes

    paras = _paragraphs(40)
    german = (
        "Die Stadtverwaltung hat am Montag neue Regeln für den Verkehr in der Innenstadt vorgestellt. Künftig dürfen "
        "Autos nur noch zu bestimmten Zeiten in die Fußgängerzone fahren, und die Anwohner bekommen eigene Ausweise. "
        "Viele Geschäftsleute befürchten, dass weniger Kunden kommen, während Umweltverbände die Pläne begrüßen."
    )
    pages = [("\n".join(f"<p>{p}</p>" for p in paras[4 * i : 4 * i + 4]), f"{i}") for i in range(5)]
    pages.append((f"<p>{german}</p><p>{german}</p>", "de"))
    html = lambda body: (
        f"<html><head><title>t</title></head><body><nav>Home | News</nav><article>{body}</article></body></html>"
    )
    records = [_warc_response(f"http://example.org/{rid}", html(body), rid) for body, rid in pages]
    (tmp_path / "crawl.warc.gz").write_bytes(b"".join(gzip.compress(r) for r in records))
    recs = "".join(json.dumps({"id": f"d{i}", "text": p}) + "\n" for i, p in enumerate(paras)).encode()
    (tmp_path / "docs.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(recs))

    ex = Executor(str(tmp_path / "store"), verbose=False)
    web = import_step(SourceConfig("web", (str(tmp_path / "crawl.warc.gz"),)))
    text = extract_step(ExtractConfig(web, min_chars=100), "extract/web")
    english = langid_step(LangIdConfig(text), "langid/web")
    jl = import_step(SourceConfig("jl", (str(tmp_path / "docs.jsonl.zst"),)))
    r = ex.run([english, jl])
    raw = list(read_documents(r[web]))
    assert [d["id"] for d in raw] == [f"web/crawl.warc.gz:urn:uuid:{rid}" for _, rid in pages]
    assert raw[0]["meta"]["url"] == "http://example.org/0" and raw[0]["meta"]["format"] == "html"
    assert len(list(read_documents(r[text]))) == 6
    kept = list(read_documents(r[english]))
    assert [d["id"].rsplit(":", 1)[-1] for d in kept] == ["0", "1", "2", "3", "4"]
    a = read_attributes(r[english]).to_pydict()
    assert a["lang"][-1] == "de" and a["reason"][-1] == "language"
    assert document_summary(r[english])["dropped"] == {"language": 1}
    got = list(read_documents(r[jl]))
    assert [d["text"] for d in got] == paras and got[3]["id"] == "jl/docs.jsonl.zst:d3"
    metrics = [json.loads(m) if isinstance(m, str) else m for m in ex.ledger.sql("select metrics from runs")["metrics"]]
    lang = [m for m in metrics if m and "data/dropped/language" in m]
    assert len(lang) == 1 and lang[0]["data/dropped/language"] == 1 and lang[0]["data/documents"] == 5, metrics
    assert {"data/documents": len(paras), "data/bytes": document_summary(r[jl])["bytes"]} in metrics


def _peak_import(path: pathlib.Path, out: pathlib.Path) -> tuple[int, dict]:
    cfg = SourceConfig("big", (str(path),), shard_docs=2_000)
    tracemalloc.start()
    r = import_task((cfg, 0, [(str(path), path.name)], str(out)))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak, r


def test_a_big_file_streams_in_bounded_memory(tmp_path):
    "A .jsonl.zst 4x as large takes no more memory to import: one shard's documents at a time, never the file."
    paras = _paragraphs(400)
    for n in (8_000, 32_000):
        with open(tmp_path / f"big{n}.jsonl.zst", "wb") as f, zstandard.ZstdCompressor().stream_writer(f) as w:
            for i in range(n):
                w.write((json.dumps({"text": paras[i % len(paras)], "i": i}) + "\n").encode())
    _peak_import(tmp_path / "big8000.jsonl.zst", tmp_path / "o0")  # warm up: imports and caches are not the file's
    small, r_small = _peak_import(tmp_path / "big8000.jsonl.zst", tmp_path / "o1")
    big, r_big = _peak_import(tmp_path / "big32000.jsonl.zst", tmp_path / "o2")
    assert len(r_small["parts"]) == 4 and len(r_big["parts"]) == 16
    assert r_big["bytes_in"] > 3.9 * r_small["bytes_in"]
    assert big < 1.5 * small, (small, big)  # the file is 4x larger; the memory is not
    assert big < 0.5 * r_big["bytes_in"], (big, r_big["bytes_in"])  # and less than the file's text: never read whole
    assert pq.ParquetFile(tmp_path / "o2" / r_big["parts"][-1]["file"]).metadata.num_rows == 2_000


def test_hf_dataset_folders_are_one_task_each(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    paths = []
    for name in ("first", "second"):
        d = tmp_path / name
        d.mkdir()
        (d / "train.jsonl").write_text("".join(json.dumps({"content": f"{name} {i}"}) + "\n" for i in range(3)))
        paths.append(str(d))
    cfg = SourceConfig("hf", tuple(paths), format="hf", text_field="content", workers=1)
    m = import_documents(cfg, str(tmp_path / "out"))
    assert [f.rsplit("/", 1)[-1] for f in document_files(str(tmp_path / "out"))] == [
        "documents-00000-0000.parquet",
        "documents-00001-0000.parquet",
    ]
    assert [d["id"] for d in read_documents(str(tmp_path / "out"))] == [d["id"] for d in iter_documents(cfg)]
    assert m["data/documents"] == 6
