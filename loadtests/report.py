"""Reports: a terminal table (rich) for one or several runs, and --compare A.json B.json with ratios."""

from __future__ import annotations

import math

from rich.console import Console
from rich.table import Table

ROWS = (
    ("requests ok", lambda r: r["ok"]),
    ("cancelled", lambda r: r.get("cancelled", 0)),
    ("errors", lambda r: sum(r["errors"].values())),
    ("wall s", lambda r: r["wall_s"]),
    ("output tokens", lambda r: r["output_tokens"]),
    ("requests/s", lambda r: r["requests_per_s"]),
    ("output tok/s", lambda r: r["output_tokens_per_s"]),
    ("decode tok/s", lambda r: r.get("decode_tokens_per_s", math.nan)),
    ("TTFT p50 ms", lambda r: r["ttft_s"]["p50"] * 1e3),
    ("TTFT p90 ms", lambda r: r["ttft_s"]["p90"] * 1e3),
    ("TTFT p99 ms", lambda r: r["ttft_s"]["p99"] * 1e3),
    ("ITL p50 ms", lambda r: r["itl_s"]["p50"] * 1e3),
    ("ITL p90 ms", lambda r: r["itl_s"]["p90"] * 1e3),
    ("ITL p99 ms", lambda r: r["itl_s"]["p99"] * 1e3),
    ("e2e p50 s", lambda r: r["e2e_s"]["p50"]),
    ("e2e p90 s", lambda r: r["e2e_s"]["p90"]),
    ("e2e p99 s", lambda r: r["e2e_s"]["p99"]),
)


def _fmt(v: float) -> str:
    if isinstance(v, int):
        return str(v)
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:.2f}" if abs(v) < 1000 else f"{v:.0f}"


def runs_table(runs: list[dict], title: str = "load test") -> Table:
    t = Table(title=title)
    t.add_column("metric")
    for r in runs:
        t.add_column(f"{r.get('scenario', '')} c={r.get('concurrency') or 'open'}", justify="right")
    for name, get in ROWS:
        t.add_row(name, *(_fmt(get(r)) for r in runs))
    return t


def compare_table(a: dict, b: dict, name_a: str = "A", name_b: str = "B") -> Table:
    t = Table(title=f"{name_a} vs {name_b}")
    for col in ("metric", name_a, name_b, "B/A"):
        t.add_column(col, justify="right" if col != "metric" else "left")
    for name, get in ROWS:
        va, vb = get(a), get(b)
        ratio = vb / va if va and not (isinstance(va, float) and math.isnan(va)) else math.nan
        t.add_row(name, _fmt(va), _fmt(vb), _fmt(ratio))
    return t


def print_table(table: Table) -> None:
    Console().print(table)


def write_charts(runs: list[dict], path: str) -> str | None:
    """Latency CDFs and throughput vs concurrency as a PNG; None when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for r in runs:
        e2e = sorted(x["e2e_s"] for x in r["results"] if x["e2e_s"] is not None and x["error"] is None)
        if e2e:
            ax1.plot(e2e, [(i + 1) / len(e2e) for i in range(len(e2e))], label=f"c={r.get('concurrency')}")
    ax1.set_xlabel("end-to-end latency (s)")
    ax1.set_ylabel("CDF")
    ax1.legend()
    cs = [r.get("concurrency") or 0 for r in runs]
    ax2.plot(cs, [r["output_tokens_per_s"] for r in runs], marker="o")
    ax2.set_xlabel("concurrency")
    ax2.set_ylabel("output tokens/s")
    fig.tight_layout()
    fig.savefig(path)
    return path
