#!/usr/bin/env python3
"""Retrains the search ranker (`core/src/recall/ranker.json`) from the features the recall
quality benchmark dumps, and judges it project by project on the projects it was not
trained on (leave one project out).

    CAIRN_BENCH_FEATURES=DIR cargo bench -p cairn --bench recall_quality
    python3 tests/bench/train_ranker.py DIR            # report only
    python3 tests/bench/train_ranker.py DIR --write     # and write ranker.json

Needs numpy (`pip install numpy`). The model is a logistic regression over the signals of
`recall::ranker` (each candidate: is it a memory the question is about?), fitted by
Newton's method with a little L2, so its output is the probability itself: no separate
calibration. Two models: with the sentence model's signals, and of words alone.

For each held-out project it reports recall@5, recall@10 and MRR@10 beside BM25-OR and the
plain fusion (RRF k=60 of BM25-OR and cosine), all from the same run, without and with the
floor; then the reliability of the held-out probabilities (expected
calibration error, over every candidate and over the top 10 shown), and the relevance of
the off-topic questions' best candidates, from which the floor (`search.min_relevance`,
which a query's best candidate must reach for anything to show) is chosen.
"""

import argparse
import json
import math
import pathlib
import sys

import numpy as np

SIGNALS = [
    "bm25", "bm25_share", "text_rank", "similarity", "similarity_gap", "similarity_lead",
    "meaning_rank", "coverage", "best_coverage", "title_coverage", "phrasing", "words",
    "duplicates",
]
L2 = 1.0
# The floors considered, lowest first.
LADDER = [0.01, 0.02, 0.03, 0.05, 0.1, 0.15, 0.2, 0.5, 1.0]
# The off-topic questions of the bench (OFF_TOPIC) made of real words, not nonsense: a
# word of theirs may well be in a memory ("match"), so they are reported, but the floor is
# chosen on the nonsense alone: made-up strings, where no memory holds a word of them
# ("asdf" is a word of one project).
EVERYDAY = {
    "what is the weather in paris tomorrow", "recipe for chocolate cake",
    "who won the football match", "my cat sleeps on the sofa",
    # Real words at random: one of them may be a word of the project ("quietly").
    "purple elephant dances quietly", "banana tractor violin",
}


def load(folder):
    """Questions by project: dicts with the candidate matrices of both searches."""
    out = {}
    for path in sorted(pathlib.Path(folder).glob("*.jsonl")):
        rows = [json.loads(line) for line in path.open()]
        for r in rows:
            for side in ("meaning", "words"):
                m = np.array(r[side], dtype=float).reshape(-1, 1 + len(SIGNALS))
                r[side] = m
        out[path.stem] = rows
    return out


def narrowed(m, pool, side):
    """The candidates pools of `pool` per side would have held (the dump's are larger)."""
    if pool is None or len(m) == 0:
        return m
    cut = 1.0 / (1.0 + pool)  # text_rank / meaning_rank of place `pool`
    t = m[:, 1 + SIGNALS.index("text_rank")]
    keep = t > cut
    if side == "meaning":
        keep |= m[:, 1 + SIGNALS.index("meaning_rank")] > cut
    return m[keep]


def fit(x, y, w):
    """Logistic regression by Newton's method, on standardized signals, each row weighted
    by `w`; returns the weights and bias on the raw signals."""
    mu = x.mean(axis=0)
    sd = x.std(axis=0)
    sd[sd == 0] = 1.0
    z = (x - mu) / sd
    z1 = np.hstack([z, np.ones((len(z), 1))])
    b = np.zeros(z1.shape[1])
    reg = np.full(z1.shape[1], L2)
    reg[-1] = 0.0
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-(z1 @ b)))
        grad = z1.T @ (w * (p - y)) + reg * b
        h = (z1 * (w * p * (1 - p))[:, None]).T @ z1 + np.diag(reg)
        step = np.linalg.solve(h, grad)
        b -= step
        if np.abs(step).max() < 1e-8:
            break
    weights = b[:-1] / sd
    bias = b[-1] - (b[:-1] * mu / sd).sum()
    return weights, bias


def relevance(m, model):
    weights, bias = model
    return 1.0 / (1.0 + np.exp(-(m[:, 1:] @ weights + bias)))


def place(m, model):
    """Place of the first relevant candidate in the model's order, or None."""
    if len(m) == 0 or m[:, 0].max() < 1:
        return None
    p = relevance(m, model)
    order = np.argsort(-p, kind="stable")
    return int(np.nonzero(m[order, 0] >= 1)[0][0])


def figures(places):
    n = max(len(places), 1)
    at5 = sum(1 for p in places if p is not None and p < 5) / n
    at10 = sum(1 for p in places if p is not None and p < 10) / n
    mrr = sum(1.0 / (p + 1) for p in places if p is not None and p < 10) / n
    return at5, at10, mrr


def cell(f):
    return " / ".join(f"{v:.3f}" for v in f)


def training(data, projects, side, pool):
    """Every candidate of the projects' questions; each project weighs the same (an easy
    project with many questions would otherwise make every estimate more sure)."""
    xs, ys, ws = [], [], []
    for p in projects:
        qs = [q for q in data[p] if not q.get("off_topic")]
        for q in qs:
            m = narrowed(q[side], pool, side)
            xs.append(m[:, 1:])
            ys.append(m[:, 0])
            ws.append(np.full(len(m), 300.0 / len(qs)))
    return np.vstack(xs), np.concatenate(ys), np.concatenate(ws)


def reliability(probs, labels, bins=10):
    """Rows (bin, count, mean predicted, observed) and the expected calibration error."""
    probs, labels = np.asarray(probs), np.asarray(labels)
    edges = np.linspace(0, 1, bins + 1)
    rows, ece = [], 0.0
    for i in range(bins):
        inside = (probs >= edges[i]) & (probs < edges[i + 1] if i < bins - 1 else probs <= 1)
        n = int(inside.sum())
        if n == 0:
            continue
        pred, seen = probs[inside].mean(), labels[inside].mean()
        ece += n / len(probs) * abs(pred - seen)
        rows.append((f"{edges[i]:.1f}-{edges[i + 1]:.1f}", n, pred, seen))
    return rows, ece


def main():
    global L2
    ap = argparse.ArgumentParser()
    ap.add_argument("features", help="the folder CAIRN_BENCH_FEATURES named")
    ap.add_argument("--pool", type=int, default=50, help="candidates per side (≤ the dump's)")
    ap.add_argument("--l2", type=float, default=1.0, help="L2 penalty on standardized weights")
    ap.add_argument("--margin", type=float, default=1.5,
                    help="the floor's factor over the highest nonsense relevance")
    ap.add_argument("--floor", type=float, help="the floor to report with (default: chosen)")
    ap.add_argument("--write", action="store_true", help="write core/src/recall/ranker.json")
    args = ap.parse_args()
    L2 = args.l2
    data = load(args.features)
    projects = sorted(data)
    print(f"projects: {', '.join(projects)}; pool {args.pool} per side\n")

    held = {side: {"probs": [], "labels": [], "top_probs": [], "top_labels": [],
                   "off": {}, "places": {}, "found": [],
                   "found_by_project": {}} for side in ("meaning", "words")}
    table = []
    for out in projects:
        rest = [p for p in projects if p != out]
        row = {"project": out}
        for side in ("meaning", "words"):
            model = fit(*training(data, rest, side, args.pool))
            h = held[side]
            places = []
            for q in data[out]:
                m = narrowed(q[side], args.pool, side)
                if q.get("off_topic"):
                    best = float(relevance(m, model).max()) if len(m) else 0.0
                    # Made-up strings are nonsense where no memory holds a word of them.
                    kind = ("nonsense" if q["query"] not in EVERYDAY and len(q["words"]) == 0
                            else "words")
                    h["off"].setdefault(out, []).append((best, f'{q["query"]} ({out})', kind))
                    continue
                at = place(m, model)
                places.append(at)
                # The floor gates a query by its best candidate.
                best = float(relevance(m, model).max()) if len(m) else 0.0
                if at is not None and at < 10:
                    h["found"].append(best)
                h["found_by_project"].setdefault(out, []).append(best)
                if len(m):
                    p = relevance(m, model)
                    h["probs"].extend(p)
                    h["labels"].extend(m[:, 0])
                    top = np.argsort(-p, kind="stable")[:10]
                    h["top_probs"].extend(p[top])
                    h["top_labels"].extend(m[top, 0])
            h["places"][out] = places
            row[side] = places
        qs = [q for q in data[out] if not q.get("off_topic")]
        for base in ("bm25", "fusion", "search"):
            row[base] = [q[base] for q in qs]
        table.append(row)

    for side in ("meaning", "words"):
        h = held[side]
        print(f"\nreliability of the held-out relevance ({side}):")
        for name, probs, labels in (("every candidate", h["probs"], h["labels"]),
                                    ("top 10 shown", h["top_probs"], h["top_labels"])):
            rows, ece = reliability(probs, labels)
            print(f"  {name}: ECE {ece:.4f} over {len(probs)}")
            for b, n, pred, seen in rows:
                print(f"    {b}  n={n:<7} predicted {pred:.3f}  observed {seen:.3f}")
        offs = sorted((v for vs in h["off"].values() for v in vs), reverse=True)
        print("  off-topic questions' best relevance (held out), highest first: "
              + ", ".join(f"{b:.3f} {q!r}" for b, q, _ in offs[:8]))
        offs = [(b, q) for b, q, kind in offs if kind == "nonsense"]
        worst = offs[0][0] if offs else 0.0
        # The first step of the ladder at least `margin` times the worst nonsense.
        floor = next((f for f in LADDER if f >= worst * args.margin), LADDER[-1])
        found = h["found"]
        print("  nonsense questions' best relevance (held out), highest first: "
              + ", ".join(f"{b:.3f} {q!r}" for b, q in offs[:5]))
        print(f"  best nonsense relevance {worst:.3f}; a floor of {floor:.2f} on a query's "
              f"best candidate shows nothing for any nonsense question, and loses "
              f"{sum(1 for r in found if r < floor)} of the {len(found)} questions whose "
              "memory is in a held-out top 10")
        print("  questions lost to a floor of "
              + ", ".join(f"{f}: {sum(1 for r in found if r < f)}" for f in LADDER))
        h["floor"] = floor
    # One setting for both models: the higher floor, unless chosen by hand.
    floor = args.floor if args.floor is not None else max(held[s]["floor"] for s in held)
    for side in held:
        held[side]["floor"] = floor
    print(f"\nfloor (search.min_relevance): {floor:.2f}\n")

    for row in table:
        for side in ("meaning", "words"):
            floor = held[side]["floor"]
            found = held[side]["found_by_project"][row["project"]]
            row[side + "+floor"] = [None if f is None or f < floor else at
                                    for at, f in zip(row[side], found)]
    cols = [("bm25", "BM25-OR"), ("fusion", "RRF k=60"),
            ("meaning", "learned (held out)"), ("meaning+floor", "learned, floor applied"),
            ("words+floor", "learned, words only, floor applied")]
    print("| project (questions) | " + " | ".join(c[1] for c in cols) + " |")
    print("| --- |" + " --- |" * len(cols))
    everything = {c: [] for c, _ in cols}
    means = {c: np.zeros(3) for c, _ in cols}
    for row in table:
        n = len(row["bm25"])
        print(f"| {row['project']} ({n}) | "
              + " | ".join(cell(figures(row[c])) for c, _ in cols) + " |")
        for c, _ in cols:
            everything[c].extend(row[c])
            means[c] += np.array(figures(row[c])) / len(table)
    print(f"| all ({len(everything['bm25'])}) | "
          + " | ".join(cell(figures(everything[c])) for c, _ in cols) + " |")
    print("| mean of projects | " + " | ".join(cell(means[c]) for c, _ in cols) + " |")

    print("\ntargets on held-out projects (learned with meaning, floor applied):")
    for row in table:
        l5, l10, _ = figures(row["meaning+floor"])
        f5, f10, _ = figures(row["fusion"])
        b5, b10, _ = figures(row["bm25"])
        print(f"  {row['project']:<10} r@5 {l5 - f5:+.3f} vs fusion (≥ +0.03: "
              f"{'met' if l5 - f5 >= 0.03 - 1e-9 else 'missed'}); r@10 {l10:.3f} vs "
              f"BM25 {b10:.3f}, fusion {f10:.3f} "
              f"({'met' if l10 >= max(b10, f10) - 1e-9 else 'missed'})")
    a5, _, amrr = figures(everything["meaning+floor"])
    print(f"  all: r@5 {a5:.3f} (≥ 0.83), MRR@10 {amrr:.3f} (≥ 0.74)")

    final = {}
    for side in ("meaning", "words"):
        weights, bias = fit(*training(data, projects, side, args.pool))
        final[side] = {"bias": round(float(bias), 6),
                       "weights": [round(float(w), 6) for w in weights]}
        print(f"\n{side} (all projects): bias {bias:+.3f}; "
              + ", ".join(f"{s} {w:+.3f}" for s, w in zip(SIGNALS, weights)))
    if args.write:
        path = pathlib.Path(__file__).resolve().parents[2] / "core/src/recall/ranker.json"
        doc = {"signals": SIGNALS, **final}
        path.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
