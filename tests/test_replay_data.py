"""Hostile inputs to `marin data` (issue #49), replayed by tests/replay.py: malformed files of every format the readers
take, decompression bombs, non-string text, bad bytes, special files and absurd numbers in every flag. Each case is a
clear error (the file, the line or record, the flag) or a correct result; none hangs, aborts, eats memory, or leaves a
step RUNNING. A bomb is small on disk and inflates to hundreds of MB: it must be refused at its limit, streaming."""

import gzip, json, os
from pathlib import Path

import pytest
from replay import Case, bytes_file

MB = 1 << 20
BOMB_MB = 300  # what a bomb inflates to: far over every limit these cases set, and over their memory bound


# ----------------------------------------------------------------------------------------------------- inputs
def _lines(d: Path, name: str, *lines: bytes) -> Path:
    return bytes_file(d / name, b"".join(line + b"\n" for line in lines))


def _gz_bomb(path: Path, head: bytes = b"", unit: bytes = b"a", tail: bytes = b"") -> None:
    """A gzip file of `head`, BOMB_MB of `unit` (streamed in 1 MB chunks), then `tail`: 1-4 MB on disk. Compression level
    1: a third of level 6's time (0.5 s a bomb, not 1.8), and still a 100-fold inflation."""
    path.parent.mkdir(parents=True, exist_ok=True)
    chunk = (unit * (MB // len(unit) + 1))[:MB]
    with gzip.open(path, "wb", compresslevel=1) as g:
        g.write(head)
        for _ in range(BOMB_MB):
            g.write(chunk)
        g.write(tail)


def _zst_bomb(path: Path, head: bytes = b"", unit: bytes = b"a") -> None:
    import zstandard

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f, zstandard.ZstdCompressor().stream_writer(f) as w:
        w.write(head)
        for _ in range(BOMB_MB):
            w.write(unit * MB)


def make_null_and_dict(d):
    _lines(
        d, "r.jsonl", b'{"text": null}', b'{"text": {"a": 1}}', b'{"text": "hello"}', b'{"text": 5}', b'{"text": []}'
    )


def make_all_null(d):
    _lines(d, "r.jsonl", *[b'{"text": null}'] * 3)


def make_parquet_ints(d):
    import pyarrow as pa, pyarrow.parquet as pq

    pq.write_table(pa.table({"text": [1, 2, 3]}), d / "t.parquet")


def make_parquet_nulls(d):
    import pyarrow as pa, pyarrow.parquet as pq

    pq.write_table(pa.table({"text": [None, "kept", None]}), d / "t.parquet")


def make_parquet_no_text(d):
    import pyarrow as pa, pyarrow.parquet as pq

    pq.write_table(pa.table({"body": ["a", "b"]}), d / "t.parquet")


def make_parquet_struct(d):
    import pyarrow as pa, pyarrow.parquet as pq

    pq.write_table(pa.table({"text": [{"a": 1}, {"a": 2}]}), d / "t.parquet")


def make_parquet_torn(d):
    bytes_file(d / "t.parquet", b"PAR1 and then nothing a Parquet reader could use")


def make_parquet_bomb(d):
    "One 40 MB text in a row group of its own: ~10 KB on disk, refused from the footer before it is read."
    import pyarrow as pa, pyarrow.parquet as pq

    pq.write_table(pa.table({"text": ["a" * (40 * MB)]}), d / "t.parquet", compression="zstd")


def make_hf_nulls(d):
    _lines(d / "hf", "data.jsonl", b'{"text": null}', b'{"text": "kept"}', b'{"text": ""}')


def make_gz_line_bomb(d):
    _gz_bomb(d / "bomb.jsonl.gz", head=b'{"text": "')


def make_zst_line_bomb(d):
    _zst_bomb(d / "bomb.jsonl.zst", head=b'{"text": "')


def make_txt_line_bomb(d):
    _gz_bomb(d / "bomb.txt.gz", head=b"a short line\n")


def make_txt_file_bomb(d):
    _gz_bomb(d / "bomb.txt.gz", unit=b"many short lines\n")


def make_paragraphs_bomb(d):
    _gz_bomb(d / "bomb.txt.gz", unit=b"a short paragraph\n\n")


def make_html_bomb(d):
    _gz_bomb(d / "page.html.gz", head=b"<html><body><p>", unit=b"<b>x</b>")


def make_fasta_record_bomb(d):
    _gz_bomb(d / "genome.fa.gz", head=b">chr1 a long one\n", unit=b"ACGT" * 15 + b"\n")


def make_fasta_line_bomb(d):
    _gz_bomb(d / "genome.fa.gz", head=b">chr1\n", unit=b"ACGT")


def make_jsonl_doc_over(d):
    bytes_file(d / "r.jsonl", b'{"text": "' + b"a" * (6 * MB) + b'"}\n')


def _warc_record(uri: str, body: bytes, rid: str, clen: int | str | None = None) -> bytes:
    http = b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n\r\n" + body
    head = (
        f"WARC/1.0\r\nWARC-Type: response\r\nWARC-Record-ID: <urn:uuid:{rid}>\r\nWARC-Date: 2024-05-06T07:08:09Z\r\n"
        f"WARC-Target-URI: {uri}\r\nContent-Type: application/http; msgtype=response\r\n"
        f"Content-Length: {len(http) if clen is None else clen}\r\n\r\n"
    )
    return head.encode() + http + b"\r\n\r\n"


_PAGES = [_warc_record(f"http://a.example/{i}", b"<p>page %d</p>" % i, str(i)) for i in range(3)]


def make_warc_ok(d):
    bytes_file(d / "crawl.warc.gz", b"".join(gzip.compress(r) for r in _PAGES))


def make_warc_garbage(d):
    bytes_file(d / "crawl.warc", b"this is no web archive\r\n" * 20)


def make_warc_truncated(d):
    page = _warc_record("http://a.example/big", b"<p>" + b"x" * 5000 + b"</p>", "9")
    bytes_file(d / "crawl.warc", b"".join(_PAGES) + page[:-2000])


def make_warc_bad_length(d):
    bad = _warc_record("http://a.example/x", b"<p>" + b"y" * 500 + b"</p>", "8", clen=40)
    bytes_file(d / "crawl.warc", _PAGES[0] + bad + _PAGES[1])


def make_warc_huge_length(d):
    huge = _warc_record("http://a.example/x", b"<p>small body, huge claim</p>", "7", clen=10**12)
    bytes_file(d / "crawl.warc", _PAGES[0] + huge)


def make_warc_non_numeric_length(d):
    bytes_file(d / "crawl.warc", _PAGES[0] + _warc_record("http://a.example/x", b"<p>z</p>", "6", clen="lots"))


def make_gz_truncated(d):
    bytes_file(d / "r.jsonl.gz", gzip.compress(b'{"text": "hello"}\n' * 2000)[:-40])


def make_gz_not_gzip(d):
    _lines(d, "r.jsonl.gz", b'{"text": "I am plain JSON with a .gz name"}')


def make_gz_empty(d):
    bytes_file(d / "r.jsonl.gz", b"")


def make_zst_truncated(d):
    import zstandard

    bytes_file(d / "r.jsonl.zst", zstandard.ZstdCompressor().compress(b'{"text": "hello"}\n' * 2000)[:-9])


def make_zst_not_zstd(d):
    _lines(d, "r.jsonl.zst", b'{"text": "plain"}')


def make_fifo(d):
    os.mkfifo(d / "pipe.jsonl")


def make_fifo_in_folder(d):
    _lines(d / "in", "a.jsonl", b'{"text": "a"}')
    os.mkfifo(d / "in" / "b.jsonl")


def make_bad_utf8(d):
    _lines(d, "r.jsonl", b'{"text": "caf\xe9 au lait"}', b'{"text": "fine"}')


def make_bad_utf8_text(d):
    _lines(d, "r.txt", b"good line", b"bad \xff\xfe line", b"good again")


def make_lone_surrogate(d):
    _lines(d, "r.jsonl", b'{"text": "half a pair \\ud800 here"}', b'{"text": "a whole pair \\ud83d\\ude00"}')


def make_json_huge_int(d):
    _lines(d, "r.jsonl", b'{"text": "a", "n": ' + b"9" * 5000 + b"}")


def make_json_deep(d):
    _lines(d, "r.jsonl", b'{"text": ' + b"[" * 200_000 + b"]" * 200_000 + b"}")


def make_binary_as_jsonl(d):
    bytes_file(d / "r.jsonl", bytes(range(256)) * 64)


def make_warc_header_bomb(d):
    "A gzipped WARC record whose one header line inflates to 300 MB."
    _gz_bomb(d / "crawl.warc.gz", head=b"WARC/1.0\r\nWARC-Type: response\r\nX-Long: ", tail=b"\r\n\r\n")


def make_pretty_json(d):
    bytes_file(d / "r.json", json.dumps([{"text": "a"}, {"text": "b"}], indent=2).encode())


def make_one_line_array(d):
    bytes_file(d / "r.json", json.dumps([{"text": "a"}, {"text": "b"}]).encode())


def make_fasta_no_header(d):
    _lines(d, "s.fa", b"ACGTACGT", b"GGCCTTAA")


def make_fasta_ok(d):
    _lines(d, "s.fa", b">one", b"acgt", b"ACGT", b">two", b"GG")


def make_documents(d):
    "A small document set, written as `marin data import` writes one (the input of the downstream commands)."
    from marin.data.sources import write_documents

    docs = [
        {"id": f"s/{i}", "text": f"document {i}: some words to count", "source": "s", "meta": {}} for i in range(20)
    ]
    write_documents(docs, str(d / "docs"))


def make_hostile_pages(d):
    "Raw HTML pages as an HTML import makes them: one nested 100,000 deep (resiliparse: ~15 minutes), one normal."
    from marin.data.sources import write_documents

    deep = "<html><body>" + "<div>" * 100_000 + "deep" + "</div>" * 100_000 + "</body></html>"
    fine = "<html><body><article><p>" + "A sentence of plain article text. " * 20 + "</p></article></body></html>"
    docs = [{"id": f"w/{k}", "text": t, "source": "w", "meta": {}} for k, t in (("deep", deep), ("fine", fine))]
    write_documents(docs, str(d / "pages"))


def check_too_deep(d: Path, output: str) -> None:
    import pyarrow.parquet as pq

    (attrs,) = (d / "store" / "extract").glob("*/attributes-*.parquet")
    assert pq.read_table(attrs)["reason"].to_pylist() == ["too-deep", ""]


def _token_set(d: Path, change=None, shard=None) -> None:
    "A real token set (the small document set, DNA-tokenized) under d/tokens, then its manifest or shard damaged."
    from marin.data.shards import TokenizeConfig, tokenize_documents

    make_documents(d)
    tokenize_documents(TokenizeConfig(str(d / "docs"), "dna", workers=1), str(d / "tokens"))
    m = json.loads((d / "tokens" / "manifest.json").read_text())
    if change:
        change(m)
        (d / "tokens" / "manifest.json").write_text(json.dumps(m))
    if shard:
        f = d / "tokens" / m["shards"][0]["file"]
        f.write_bytes(shard(f.read_bytes()))


def make_tokens_ok(d):
    _token_set(d)


def make_tokens_manifest_not_json(d):
    _token_set(d)
    (d / "tokens" / "manifest.json").write_text("{not json")


def make_tokens_path_escape(d):
    _token_set(d, lambda m: m["shards"][0].update(file="../../../../etc/passwd"))


def make_tokens_count_lies(d):
    _token_set(d, lambda m: (m["shards"][0].update(documents=10**15), m.update(documents=10**15)))


def make_tokens_shards_not_list(d):
    _token_set(d, lambda m: m.update(shards=5))


def make_tokens_vocab_too_small(d):
    _token_set(d, lambda m: m["tokenizer"].update(vocab_size=2))


def make_tokens_truncated_shard(d):
    _token_set(d, shard=lambda b: b[: len(b) // 2])


def summary_counts(want: dict):
    "A check: the import's summary.json holds these counts (`dropped`, `replaced`, `documents`)."

    def check(d: Path, output: str) -> None:
        (summary,) = (d / "store" / "documents").glob("*/summary.json")
        s = json.loads(summary.read_text())
        for k, v in want.items():
            assert s[k] == v, (k, s[k], v)

    return check


def check_null_and_dict(d: Path, output: str) -> None:
    import pyarrow.parquet as pq

    summary_counts({"documents": 1, "dropped": {"text_not_string": 3, "text_null": 1}})(d, output)
    (shard,) = (d / "store" / "documents").glob("*/documents-*.parquet")
    assert pq.read_table(shard)["text"].to_pylist() == ["hello"]  # not 'None', not "{'a': 1}"


# ------------------------------------------------------------------------------------------------------ cases
def _imp(*args: str) -> tuple[str, ...]:
    return ("data", "import", *args)


BOMB_RSS = 700  # MB: a bomb read whole would hold 300 MB several times over (the issue measured 5 GB for 1.5 GB)

CASES = [
    # 1. text that is not a string: dropped, counted by reason, the same from every reader
    Case(
        "text/null-dict-number-list",
        argv=_imp("r", "{d}/r.jsonl"),
        make=make_null_and_dict,
        expect="ok",
        says=("4 records dropped (text_not_string: 3, text_null: 1)",),
        check=check_null_and_dict,
    ),
    Case(
        "text/every-record-null",
        argv=_imp("r", "{d}/r.jsonl"),
        make=make_all_null,
        code=1,
        says=("yielded no documents", "3 records dropped (text_null: 3)", "--text-field"),
    ),
    Case(
        "parquet/text-column-int64",
        argv=_imp("p", "{d}/t.parquet"),
        make=make_parquet_ints,
        code=1,
        says=("t.parquet", "column 'text' holds int64, not text", "--text-field"),
    ),
    Case(
        "parquet/text-column-struct",
        argv=_imp("p", "{d}/t.parquet"),
        make=make_parquet_struct,
        code=1,
        says=("t.parquet", "column 'text' holds struct"),
    ),
    Case(
        "parquet/text-nulls",
        argv=_imp("p", "{d}/t.parquet"),
        make=make_parquet_nulls,
        expect="ok",
        says=("2 records dropped (text_null: 2)",),
        check=summary_counts({"documents": 1, "dropped": {"text_null": 2}}),
    ),
    Case(
        "parquet/no-text-column",
        argv=_imp("p", "{d}/t.parquet"),
        make=make_parquet_no_text,
        code=1,
        says=("t.parquet", "no column 'text'", "['body']", "--text-field"),
    ),
    Case(
        "parquet/torn-file",
        argv=_imp("p", "{d}/t.parquet"),
        make=make_parquet_torn,
        code=1,
        says=("t.parquet", "not a readable Parquet file"),
    ),
    Case(
        "hf/local-folder-null-text",
        argv=_imp("h", "{d}/hf", "--format", "hf"),
        make=make_hf_nulls,
        expect="ok",
        says=("2 records dropped (empty: 1, text_null: 1)",),
        check=summary_counts({"documents": 1}),
    ),
    # 2. bombs: refused at their limit while streaming, naming the file, the line and the flag
    Case(
        "bomb/jsonl-gz-one-300MB-line",
        argv=_imp("b", "{d}/bomb.jsonl.gz"),
        make=make_gz_line_bomb,
        code=1,
        says=("bomb.jsonl.gz line 1", "longer than 64 MB", "--max-line-mb"),
        max_rss_mb=BOMB_RSS,
    ),
    Case(
        "bomb/jsonl-zst-one-300MB-line",
        argv=_imp("b", "{d}/bomb.jsonl.zst", "--max-line-mb", "8"),
        make=make_zst_line_bomb,
        code=1,
        says=("bomb.jsonl.zst line 1", "longer than 8 MB", "--max-line-mb"),
        max_rss_mb=BOMB_RSS,
    ),
    Case(
        "bomb/text-lines-gz",
        argv=_imp("b", "{d}/bomb.txt.gz", "--split", "lines", "--max-line-mb", "4"),
        make=make_txt_line_bomb,
        code=1,
        says=("bomb.txt.gz line 2", "--max-line-mb"),
        max_rss_mb=BOMB_RSS,
    ),
    Case(
        "bomb/text-file-read-whole",
        argv=_imp("b", "{d}/bomb.txt.gz", "--max-doc-mb", "16"),
        make=make_txt_file_bomb,
        code=1,
        says=("bomb.txt.gz", "longer than 16 MB", "--max-doc-mb"),
        max_rss_mb=BOMB_RSS,
    ),
    Case(
        "bomb/text-one-endless-paragraph",
        argv=_imp("b", "{d}/bomb.txt.gz", "--split", "paragraphs", "--max-doc-mb", "8"),
        make=make_txt_file_bomb,
        code=1,
        says=("bomb.txt.gz line", "a paragraph longer than 8 MB", "--max-doc-mb"),
        max_rss_mb=BOMB_RSS,
    ),
    Case(
        "bomb/paragraph-groups-max-chars-1e30",
        argv=_imp("b", "{d}/bomb.txt.gz", "--split", "paragraphs", "--max-chars", str(10**30), "--max-doc-mb", "8"),
        make=make_paragraphs_bomb,
        code=1,
        says=("bomb.txt.gz", "a paragraph group longer than 8 MB", "--max-chars", "--max-doc-mb"),
        max_rss_mb=BOMB_RSS,
    ),
    Case(
        "bomb/html-page",
        argv=_imp("b", "{d}/page.html.gz", "--max-doc-mb", "8"),
        make=make_html_bomb,
        code=1,
        says=("page.html.gz", "longer than 8 MB", "--max-doc-mb"),
        max_rss_mb=BOMB_RSS,
    ),
    Case(
        "bomb/fasta-record",
        argv=_imp("b", "{d}/genome.fa.gz", "--max-doc-mb", "8"),
        make=make_fasta_record_bomb,
        code=1,
        says=("genome.fa.gz record 'chr1 a long one'", "longer than 8 MB", "--max-doc-mb"),
        max_rss_mb=BOMB_RSS,
    ),
    Case(
        "bomb/fasta-one-line-sequence",
        argv=_imp("b", "{d}/genome.fa.gz", "--max-line-mb", "8"),
        make=make_fasta_line_bomb,
        code=1,
        says=("genome.fa.gz line 2", "--max-line-mb"),
        max_rss_mb=BOMB_RSS,
    ),
    Case(
        "bomb/parquet-40MB-text-in-10KB",
        argv=_imp("b", "{d}/t.parquet", "--max-doc-mb", "8"),
        make=make_parquet_bomb,
        code=1,
        says=("t.parquet row group 0", "--max-doc-mb"),
        max_rss_mb=200,  # refused from the footer: the 40 MB text is never read
    ),
    Case(
        "limit/jsonl-text-over-doc-limit",
        argv=_imp("j", "{d}/r.jsonl", "--max-doc-mb", "4"),
        make=make_jsonl_doc_over,
        code=1,
        says=("r.jsonl", "document 'j/r.jsonl:0'", "over 4 MB", "--max-doc-mb"),
    ),
    Case(
        "warc/declared-length-1e12",
        argv=_imp("w", "{d}/crawl.warc"),
        make=make_warc_huge_length,
        code=1,
        says=("crawl.warc record urn:uuid:7", "--max-doc-mb"),
    ),
    # 4. damaged files: the file and the line or record
    Case(
        "gz/truncated",
        argv=_imp("g", "{d}/r.jsonl.gz"),
        make=make_gz_truncated,
        code=1,
        says=("r.jsonl.gz line", "ends early (a truncated file)"),
    ),
    Case(
        "gz/not-gzip",
        argv=_imp("g", "{d}/r.jsonl.gz"),
        make=make_gz_not_gzip,
        code=1,
        says=("r.jsonl.gz line 1", "not gzip data"),
    ),
    Case(
        "gz/empty-file",
        argv=_imp("g", "{d}/r.jsonl.gz"),
        make=make_gz_empty,
        code=1,
        says=("yielded no documents",),
    ),
    Case(
        "zst/truncated",
        argv=_imp("z", "{d}/r.jsonl.zst"),
        make=make_zst_truncated,
        code=1,
        says=("r.jsonl.zst line", "ends inside a frame"),
    ),
    Case(
        "zst/not-zstd",
        argv=_imp("z", "{d}/r.jsonl.zst"),
        make=make_zst_not_zstd,
        code=1,
        says=("r.jsonl.zst line 1", "no zstandard frame"),
    ),
    Case(
        "special/fifo-as-input",
        argv=_imp("f", "{d}/pipe.jsonl"),
        make=make_fifo,
        code=2,
        says=("pipe.jsonl", "is a FIFO (named pipe), not a regular file"),
        seconds=30,
    ),
    Case(
        "special/fifo-in-folder",
        argv=_imp("f", "{d}/in"),
        make=make_fifo_in_folder,
        code=2,
        says=("b.jsonl", "FIFO"),
        seconds=30,
    ),
    Case(
        "special/dev-zero",
        argv=_imp("z", "/dev/zero", "--format", "text"),
        code=2,
        says=("/dev/zero", "a character device"),
        seconds=30,
    ),
    Case(
        "warc/garbage",
        argv=_imp("w", "{d}/crawl.warc"),
        make=make_warc_garbage,
        code=1,
        says=("crawl.warc", "is not a WARC record"),
    ),
    Case(
        "warc/truncated-body",
        argv=_imp("w", "{d}/crawl.warc"),
        make=make_warc_truncated,
        code=1,
        says=("crawl.warc record urn:uuid:9", "truncated file"),
    ),
    Case(
        "warc/content-length-too-short",
        argv=_imp("w", "{d}/crawl.warc"),
        make=make_warc_bad_length,
        code=1,
        says=("crawl.warc", "is not a WARC record", "Content-Length"),
    ),
    Case(
        "warc/content-length-not-a-number",
        argv=_imp("w", "{d}/crawl.warc"),
        make=make_warc_non_numeric_length,
        code=1,
        says=("crawl.warc", "is not a WARC record"),
    ),
    Case(
        "warc/gzipped-ok",
        argv=_imp("w", "{d}/crawl.warc.gz"),
        make=make_warc_ok,
        expect="ok",
        check=summary_counts({"documents": 3}),
    ),
    Case(
        "utf8/invalid-bytes-counted",
        argv=_imp("u", "{d}/r.jsonl"),
        make=make_bad_utf8,
        expect="ok",
        says=("1 document with bad bytes replaced (invalid_utf8: 1)",),
        check=summary_counts({"documents": 2, "replaced": {"invalid_utf8": 1}}),
    ),
    Case(
        "utf8/invalid-bytes-text-lines",
        argv=_imp("u", "{d}/r.txt", "--split", "lines"),
        make=make_bad_utf8_text,
        expect="ok",
        check=summary_counts({"documents": 3, "replaced": {"invalid_utf8": 1}}),
    ),
    Case(
        "utf8/json-lone-surrogate",
        argv=_imp("u", "{d}/r.jsonl"),
        make=make_lone_surrogate,
        expect="ok",
        says=("lone_surrogate: 1",),
        check=summary_counts({"documents": 2, "replaced": {"lone_surrogate": 1}}),
    ),
    Case(
        "bomb/warc-gz-300MB-header-line",
        argv=_imp("w", "{d}/crawl.warc.gz"),
        make=make_warc_header_bomb,
        code=1,
        says=("crawl.warc.gz", "is not a WARC record", "Maximum header length exceeded"),
        max_rss_mb=BOMB_RSS,
    ),
    Case(
        "json/pretty-printed-array",
        argv=_imp("j", "{d}/r.json"),
        make=make_pretty_json,
        code=1,
        says=("r.json line 1: not JSON", "write one record per line"),
    ),
    Case(
        "json/one-line-array",
        argv=_imp("j", "{d}/r.json"),
        make=make_one_line_array,
        code=1,
        says=("r.json line 1: a JSON list", "write one record per line"),
    ),
    Case(
        "jsonl/5000-digit-integer",
        argv=_imp("j", "{d}/r.jsonl"),
        make=make_json_huge_int,
        code=1,
        says=("r.jsonl line 1: not JSON",),
    ),
    Case(
        "jsonl/nested-200000-deep",
        argv=_imp("j", "{d}/r.jsonl"),
        make=make_json_deep,
        code=1,
        says=("r.jsonl line 1: not JSON",),
    ),
    Case(
        "jsonl/binary-file",
        argv=_imp("j", "{d}/r.jsonl"),
        make=make_binary_as_jsonl,
        code=1,
        says=("r.jsonl line 1: not JSON", "--format"),
    ),
    Case(
        "fasta/no-header",
        argv=_imp("s", "{d}/s.fa"),
        make=make_fasta_no_header,
        code=1,
        says=("s.fa", "no FASTA header", "--format"),
    ),
    Case(
        "fasta/ok",
        argv=_imp("s", "{d}/s.fa"),
        make=make_fasta_ok,
        expect="ok",
        check=summary_counts({"documents": 2}),
    ),
    # absurd numbers in every flag of `marin data import`
    *[
        Case(
            f"import-flags/{flag}={value}",
            argv=_imp("r", "{d}/r.jsonl", flag, value),
            make=make_bad_utf8,
            code=2,
            says=(flag,),
        )
        for flag, value in [
            ("--max-line-mb", "0"),
            ("--max-line-mb", "nan"),
            ("--max-line-mb", "-1"),
            ("--max-doc-mb", "inf"),
            ("--max-doc-mb", "1e12"),
            ("--limit", "-5"),
            ("--max-chars", "-1"),
            ("--split", "words"),
            ("--format", "yaml"),
        ]
    ],
    Case(
        "import-flags/limit-1e18-is-fine",
        argv=_imp("r", "{d}/r.jsonl", "--limit", str(10**18)),
        make=make_bad_utf8,
        expect="ok",
        check=summary_counts({"documents": 2}),
    ),
    # 3. the tokenizer trainer and the other commands: numbers checked before any step starts, the flag named
    Case(
        "train-tokenizer/vocab-size-1e9",
        argv=("data", "train-tokenizer", "{d}/docs", "--vocab-size", "1000000000"),
        make=make_documents,
        code=2,
        says=("--vocab-size", "1000000000", "2,097,152"),
    ),
    *[
        Case(
            f"train-tokenizer/{flag}={value}",
            argv=("data", "train-tokenizer", "{d}/docs", flag, value),
            make=make_documents,
            code=2,
            says=(flag,),
        )
        for flag, value in [
            ("--vocab-size", "0"),
            ("--vocab-size", "-5"),
            ("--vocab-size", "99999999999999999999999"),
            ("--max-documents", "-1"),
        ]
    ],
    Case(
        "train-tokenizer/no-such-document-set",
        argv=("data", "train-tokenizer", "{d}/nowhere"),
        code=2,
        says=("nowhere", "not a document set"),
    ),
    Case(
        "train-tokenizer/ok",
        argv=("data", "train-tokenizer", "{d}/docs", "--vocab-size", "300"),
        make=make_documents,
        expect="ok",
        seconds=120,
    ),
    *[
        Case(
            f"tokenize/{'='.join(a[-2:])}",
            argv=("data", "tokenize", "{d}/docs", *a),
            make=make_documents,
            code=2,
            says=(says,),
        )
        for a, says in [
            (("--tokenizer", "dna:k=0"), "dna:k=0"),
            (("--tokenizer", "dna:k=99"), "dna:k=99"),
            (("--tokenizer", "dna:k=x"), "dna:k=x"),
            (("--tokenizer", "dna", "--docs-per-shard", "0"), "--docs-per-shard"),
            (("--tokenizer", "dna", "--workers", "-1"), "--workers"),
        ]
    ],
    *[
        Case(
            f"dedup/{flag}={value}",
            argv=("data", "dedup", "{d}/docs", flag, value),
            make=make_documents,
            code=2,
            says=(flag,),
        )
        for flag, value in [
            ("--num-perm", "1000000000"),
            ("--num-perm", "0"),
            ("--bands", "0"),
            ("--shingle", "0"),
            ("--threshold", "2"),
            ("--threshold", "nan"),
        ]
    ],
    *[
        Case(
            f"filter/{flag}={value}",
            argv=("data", "filter", "{d}/docs", flag, value),
            make=make_documents,
            code=2,
            says=(flag,),
        )
        for flag, value in [("--min-score", "nan"), ("--min-score", "-1"), ("--keep-top-fraction", "0")]
    ],
    *[
        Case(
            f"extract/{flag}={value}",
            argv=("data", "extract", "{d}/docs", flag, value),
            make=make_documents,
            code=2,
            says=(flag,),
        )
        for flag, value in [
            ("--min-chars", "-1"),
            ("--max-page-mb", "0"),
            ("--max-page-mb", "nan"),
            ("--max-depth", "0"),
            ("--max-depth", "1000000000"),
            ("--extractor", "bogus"),
        ]
    ],
    Case(
        "extract/resiliparse-page-nested-100000-deep",
        argv=("data", "extract", "{d}/pages", "--extractor", "resiliparse", "--min-chars", "10"),
        make=make_hostile_pages,
        expect="ok",
        check=check_too_deep,
        seconds=60,
    ),
    Case(
        "extract/no-such-document-set",
        argv=("data", "extract", "{d}/nowhere"),
        code=2,
        says=("nowhere", "not a document set"),
    ),
    # token sets: a manifest that lies or a damaged shard is one line naming the file and the field
    Case(
        "verify/ok", argv=("data", "verify", "{d}/tokens"), make=make_tokens_ok, expect="ok", says=("ok: 20 documents",)
    ),
    Case(
        "verify/manifest-not-json",
        argv=("data", "verify", "{d}/tokens"),
        make=make_tokens_manifest_not_json,
        code=2,
        says=("manifest.json: not JSON",),
    ),
    Case(
        "verify/shard-path-escapes",
        argv=("data", "verify", "{d}/tokens"),
        make=make_tokens_path_escape,
        code=2,
        says=("shards[0].file", "../../../../etc/passwd", "not a file name beside the manifest"),
    ),
    Case(
        "verify/counts-1e15-documents",
        argv=("data", "verify", "{d}/tokens"),
        make=make_tokens_count_lies,
        code=2,
        says=("shard-00000.arrow", "holds 20 documents", "the manifest says 1000000000000000"),
    ),
    Case(
        "verify/shards-not-a-list",
        argv=("data", "verify", "{d}/tokens"),
        make=make_tokens_shards_not_list,
        code=2,
        says=("manifest.json", "'shards' is not a list"),
    ),
    Case(
        "verify/ids-outside-vocabulary",
        argv=("data", "verify", "{d}/tokens"),
        make=make_tokens_vocab_too_small,
        code=2,
        says=("token ids outside the vocabulary [0, 2)",),
    ),
    Case(
        "verify/truncated-shard",
        argv=("data", "verify", "{d}/tokens"),
        make=make_tokens_truncated_shard,
        code=2,
        says=("shard-00000.arrow", "truncated?"),
    ),
    Case(
        "verify/not-a-token-set",
        argv=("data", "verify", "{d}"),
        code=2,
        says=("no manifest.json",),
    ),
    Case("mixture/steps=-1", argv=("data", "mixture", "--steps", "-1"), code=2, says=("--steps",)),
    Case("mixture/limit=-1", argv=("data", "mixture", "--limit", "-1"), code=2, says=("--limit",)),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_replay(case, replayed):
    replayed.check(case)
