"""Re-encodes ServeGen's per-client data into the compact files shipped beside this script.

Provenance script, not imported by the package. Usage (from the repository root)::

    python scripts/make_servegen_data.py SERVEGEN_DATA_DIR

``SERVEGEN_DATA_DIR`` is ServeGen's ``data/`` folder (alibaba/ServeGen @ f891d11), holding
``<category>/<model>/chunk-<client>-{trace.csv,dataset.json}``. One file per model is written,
``<category>-<model>.json.gz`` (gzip without a timestamp, so reruns are byte-identical).

Encoding (lossless for every probability the generator can draw):

* ``trace_csv``: the client's ``chunk-<id>-trace.csv``, verbatim.
* ``dataset``: ``{window_start_s: {field: pmf or null}}``; an empty upstream distribution
  (``"{}"``) becomes ``null``. Upstream stores each pmf as the text of a Python dict
  ``{value: probability}``. Here a pmf keeps only its non-zero entries, as ``{"v": values}``
  (integer values delta-encoded as ``"dv"``) plus either ``{"n": N, "c": counts}`` when every
  probability is exactly ``count / N`` in float64 (true for most: they are empirical
  frequencies), or ``{"p": probabilities}`` verbatim otherwise.
"""

from __future__ import annotations

import ast
import gzip
import json
import sys
from pathlib import Path

SOURCE = "alibaba/ServeGen@f891d1189eb32b3868dfc443800c4150548c282a:data/"


def encode_pmf(pmf: dict) -> dict | None:
    """Compact, exact encoding of one ``{value: probability}`` pmf (None when empty)."""
    items = [(value, prob) for value, prob in pmf.items() if prob > 0]
    if not items:
        return None
    values = [value for value, _ in items]
    probs = [prob for _, prob in items]
    out: dict = {}
    if all(isinstance(v, int) for v in values) and values == sorted(values):
        out["dv"] = [values[0]] + [b - a for a, b in zip(values, values[1:], strict=False)]
    else:
        out["v"] = values
    smallest = min(probs)
    for multiple in range(1, 50):
        total = round(multiple / smallest)
        counts = [round(p * total) for p in probs]
        if sum(counts) == total and all(c / total == p for c, p in zip(counts, probs, strict=True)):
            out["n"], out["c"] = total, counts
            return out
    out["p"] = probs
    return out


def convert_model(model_dir: Path) -> dict:
    """Reads one model's chunk files into the shipped JSON structure."""
    clients = []
    ids = sorted(int(p.name.split("-")[1]) for p in model_dir.glob("chunk-*-trace.csv"))
    for client in ids:
        trace_csv = (model_dir / f"chunk-{client}-trace.csv").read_text(encoding="utf-8")
        dataset_path = model_dir / f"chunk-{client}-dataset.json"
        dataset = None
        if dataset_path.is_file():
            raw = json.loads(dataset_path.read_text(encoding="utf-8"))
            dataset = {
                ts: {name: encode_pmf(ast.literal_eval(text)) for name, text in fields.items()}
                for ts, fields in raw.items()
            }
        clients.append({"id": client, "trace_csv": trace_csv, "dataset": dataset})
    return {
        "format": "llmsched-servegen-v1",
        "category": model_dir.parent.name,
        "model": model_dir.name,
        "source": f"{SOURCE}{model_dir.parent.name}/{model_dir.name}/",
        "clients": clients,
    }


def main(data_dir: str) -> None:
    """Converts every ``<category>/<model>`` folder under ``data_dir``."""
    out_dir = Path(__file__).resolve().parent
    for model_dir in sorted(Path(data_dir).glob("*/*")):
        if not model_dir.is_dir():
            continue
        payload = json.dumps(convert_model(model_dir), separators=(",", ":")).encode()
        target = out_dir / f"{model_dir.parent.name}-{model_dir.name}.json.gz"
        target.write_bytes(gzip.compress(payload, compresslevel=9, mtime=0))
        print(f"{target.name}: {len(payload):,} bytes -> {target.stat().st_size:,} gzipped")


if __name__ == "__main__":
    main(sys.argv[1])
