"""HTML main-text extraction on ../shared/data/html (50 annotated pages): with-recall, without-rejection, speed.

Run: .venv/bin/python bench/data_extract.py"""

import time
from marin.data.extract import EXTRACTORS, evaluate_extractor

print("| extractor | with-recall | without-rejection | seconds (50 pages) |")
print("|---|---|---|---|")
for e in EXTRACTORS:
    t = time.perf_counter()
    m = evaluate_extractor(e)
    dt = time.perf_counter() - t
    print(
        f"| {e} | {m['with_recall']:.3f} ({m['with']} snippets) | {m['without_rejection']:.3f} ({m['without']} snippets) | {dt:.2f} |"
    )
