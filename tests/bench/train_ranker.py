#!/usr/bin/env python3
"""Retrains the search ranker (`core/src/recall/ranker.json`) from the features the recall
quality benchmark dumps, and judges it project by project on the projects it was not
trained on (leave one project out).

    CAIRN_BENCH_FEATURES=DIR cargo bench -p cairn --bench recall_quality
    python3 tests/bench/train_ranker.py DIR                  # report only
    python3 tests/bench/train_ranker.py DIR --write          # and write ranker.json
    python3 tests/bench/train_ranker.py DIR --lopo OUT       # and each project's weights
                                                             # trained without it, OUT/<p>.json

Needs numpy (`pip install numpy`). Two logistic models per kind of search (with the
sentence model's signals, and of words alone), fitted by Newton's method with a little L2,
so that their outputs are probabilities themselves (no separate calibration):

- the candidate model, over the signals of `recall::ranker` (each candidate of a question:
  is it a memory the question is about?), trained on the projects' own questions;
- the query model (the gate), over `ranker::query_signals` of all the candidates of a query
  (is this a question about this project's past?): the projects' own questions against
  the negatives asked of each project, the other projects' questions, the `train` everyday
  prompts of `everyday.json` and the made-up off-topic queries. The project's questions
  and its negatives weigh the same (a prior of one half), and within the negatives the
  other projects' questions and the everyday prompts weigh the same.

A memory's relevance to a prompt is the product; a search asked on purpose shows the
candidate estimate alone (`rank::Purpose`). For each held-out project it reports the search's
recall@5, recall@10 and MRR@10 beside BM25-OR and the plain fusion (RRF k=60 of BM25-OR
and cosine) from the same run, without and with the floor; what prompt recall would give
(hit rate, and noise on the other projects' questions and on the held-out everyday
prompts, which nothing here is trained or tuned on); the reliability of the held-out
relevance and candidate estimate; and the two thresholds, each chosen from the other projects only:
- `search.min_relevance`, which a query's best candidate's estimate by the candidate model
  (by meaning alone: its relevance) must reach for anything to show (a search is asked on
  purpose: the query model, trained on sentences, rates a lone keyword like an everyday
  request): the highest step of LADDER at most `--margin` times below the lowest best
  estimate of a question whose memory the ranking puts in a top 10 (hiding no such
  question with room to spare), reported beside the made-up queries' highest, which it
  must be above;
- `recall.min_relevance`, which a memory must reach to be given with a prompt: the first
  step of LADDER at which the noise of the training negatives (other projects' questions,
  `train` everyday prompts) is at most `--noise`.
The shipped thresholds are the same rules applied to every project's held-out relevance.
"""

import argparse
import json
import pathlib
import sys

import numpy as np

SIGNALS = [
    "bm25", "bm25_share", "text_rank", "similarity", "similarity_gap", "similarity_lead",
    "meaning_rank", "coverage", "best_coverage", "title_coverage", "phrasing", "words",
    "duplicates", "rarity", "query_rarity", "fusion", "part_similarity", "parted",
    "title_precision",
]
QUERY_SIGNALS = [
    "top", "margin", "best_coverage", "best_title_coverage", "best_phrasing", "best_rarity",
    "crowd", "words", "best_similarity", "best_lead", "top_duplicates",
]
COL = {s: i + 1 for i, s in enumerate(SIGNALS)}
L2 = 1.0
# The thresholds considered, lowest first.
LADDER = [0.001, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55,
          0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0]
# Memories given with a prompt at most (`recall.max_memories`).
GIVEN = 3
SIDES = ("meaning", "words")
# The off-topic queries of the bench (OFF_TOPIC) made of real words.
REAL_WORDS = {
    "what is the weather in paris tomorrow", "recipe for chocolate cake",
    "who won the football match", "my cat sleeps on the sofa",
    "purple elephant dances quietly", "banana tractor violin",
}


def load(folder):
    """Queries by project: dicts with the candidate matrices of both searches, and `role`:
    `question` (the project's own), `other`, `train`, `held_out` (everyday) or
    `nonsense`."""
    out = {}
    for path in sorted(pathlib.Path(folder).glob("*.jsonl")):
        rows = [json.loads(line) for line in path.open()]
        for r in rows:
            for side in SIDES:
                r[side] = np.array(r[side], dtype=float).reshape(-1, 1 + len(SIGNALS))
            if r.get("off_topic"):
                r["role"] = "nonsense"
            else:
                r["role"] = r.get("negative", "question")
        out[path.stem] = rows
    return out


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
    for _ in range(60):
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


def prob(x, model):
    weights, bias = model
    return 1.0 / (1.0 + np.exp(-(x @ weights + bias)))


def query_signals(m, p):
    """`ranker::query_signals`: the candidates' signals `m` (label first) and their
    candidate-model estimates `p`."""
    if len(m) == 0:
        return np.zeros(len(QUERY_SIGNALS))
    t = int(np.argmax(p))
    top = p[t]
    ties = np.count_nonzero(p == top)
    below = p[p < top]
    second = max(below.max() if len(below) else 0.0, top if ties > 1 else 0.0, 0.0)
    col = lambda s: m[:, COL[s]]
    mx = lambda s: max(0.0, col(s).max())
    best_coverage = mx("coverage")
    crowd = np.count_nonzero(col("coverage") >= best_coverage - 1e-9) if best_coverage > 0 else 0
    return np.array([
        top, top - second, best_coverage, mx("title_coverage"), mx("phrasing"), mx("rarity"),
        np.log1p(crowd), m[t, COL["words"]], mx("similarity"), mx("similarity_lead"),
        m[t, COL["duplicates"]],
    ])


def candidate_training(data, projects, side):
    """Every candidate of the projects' own questions; each project weighs the same."""
    xs, ys, ws = [], [], []
    for p in projects:
        qs = [q for q in data[p] if q["role"] == "question"]
        for q in qs:
            m = q[side]
            xs.append(m[:, 1:])
            ys.append(m[:, 0])
            ws.append(np.full(len(m), 300.0 / len(qs)))
    return np.vstack(xs), np.concatenate(ys), np.concatenate(ws)


def query_training(data, projects, side, cands):
    """One row per query of the projects: its query signals, 1 for a question of the
    project, 0 for a negative. Per project the questions weigh 100 and the negatives 100
    (other projects' questions 50, everyday prompts 50, made-up queries within those).
    `cands[p]` is the candidate model a project's candidates are estimated by: one trained
    without it, as the held-out project's will be."""
    xs, ys, ws = [], [], []
    for p in projects:
        cand = cands[p]
        groups = {"question": [], "other": [], "everyday": []}
        for q in data[p]:
            role = {"train": "everyday", "nonsense": "everyday"}.get(q["role"], q["role"])
            if role in groups:
                groups[role].append(q)
        share = {"question": 100.0, "other": 50.0, "everyday": 50.0}
        for role, qs in groups.items():
            for q in qs:
                m = q[side]
                if len(m) == 0:
                    continue
                xs.append(query_signals(m, prob(m[:, 1:], cand)))
                ys.append(1.0 if role == "question" else 0.0)
                ws.append(share[role] / len(qs))
    return np.array(xs), np.array(ys), np.array(ws)


CANDIDATE_MODELS = {}


def candidate_model(data, projects, side):
    key = (side, frozenset(projects))
    if key not in CANDIDATE_MODELS:
        CANDIDATE_MODELS[key] = fit(*candidate_training(data, projects, side))
    return CANDIDATE_MODELS[key]


def train(data, projects, side):
    """The candidate model on the projects, and the query model on the candidate
    estimates of each project by a candidate model trained without it."""
    cand = candidate_model(data, projects, side)
    inner = {p: candidate_model(data, [o for o in projects if o != p], side)
             for p in projects}
    gate = fit(*query_training(data, projects, side, inner))
    return cand, gate


def relevances(m, models):
    """Each candidate's relevance (candidate estimate × the query's) and the candidate
    estimates alone (the order)."""
    cand, gate = models
    if len(m) == 0:
        return np.zeros(0), np.zeros(0)
    p = prob(m[:, 1:], cand)
    g = float(prob(query_signals(m, p)[None, :], gate)[0])
    return p * g, p


def judge(data, project, side, models):
    """What the models make of each query of the project: dicts of role, the place of the
    first relevant memory in the order (None when not among the candidates), the best
    relevance, whether a prompt at threshold t would get the memory (the relevance of the
    best relevant memory among the first GIVEN), and the candidates' (relevance, label)."""
    out = []
    for q in data[project]:
        m = q[side]
        r, p = relevances(m, models)
        row = {"role": q["role"], "query": q["query"], "from": q.get("from"),
               "by_words": len(q["words"]) > 0,
               "best": float(r.max()) if len(r) else 0.0,
               # What the search floor gates: the estimate of a candidate holding a word of
               # the query, the relevance of one found by meaning alone.
               "best_estimate": float(np.where(m[:, COL["coverage"]] > 0, p, r).max())
               if len(p) else 0.0, "place": None, "hit_at": 0.0,
               "r": r, "p": p, "labels": m[:, 0] if len(m) else np.zeros(0)}
        if q["role"] == "question":
            row["bm25"], row["fusion"] = q["bm25"], q["fusion"]
            if len(m) and m[:, 0].max() >= 1:
                order = np.argsort(-p, kind="stable")
                row["place"] = int(np.nonzero(m[order, 0] >= 1)[0][0])
                first = order[:GIVEN]
                hits = [r[i] for i in first if m[i, 0] >= 1]
                row["hit_at"] = max(hits) if hits else 0.0
        out.append(row)
    return out


def figures(places):
    n = max(len(places), 1)
    at5 = sum(1 for p in places if p is not None and p < 5) / n
    at10 = sum(1 for p in places if p is not None and p < 10) / n
    mrr = sum(1.0 / (p + 1) for p in places if p is not None and p < 10) / n
    return at5, at10, mrr


def cell(f):
    return " / ".join(f"{v:.3f}" for v in f)


def share(rows, t):
    return sum(1 for r in rows if r["best"] >= t) / max(len(rows), 1)


def prompt_figures(rows, t):
    """Hit rate, noise of other projects' questions, of held-out everyday prompts, of
    training everyday prompts, at threshold t."""
    qs = [r for r in rows if r["role"] == "question"]
    hit = sum(1 for r in qs if r["hit_at"] >= t) / max(len(qs), 1)
    return (hit, share([r for r in rows if r["role"] == "other"], t),
            share([r for r in rows if r["role"] == "held_out"], t),
            share([r for r in rows if r["role"] == "train"], t))


def prompt_threshold(rows, noise):
    """The first step of the ladder where the training negatives' noise is ≤ `noise`."""
    negs = [r for r in rows if r["role"] in ("other", "train")]
    return next((t for t in LADDER if share(negs, t) <= noise), LADDER[-1])


def made_up(r):
    """An off-topic query of the bench made up of strings no memory holds (`zzzzqqq`), not
    of real words, one of which may well be a word of the project ("match")."""
    return r["role"] == "nonsense" and r["query"] not in REAL_WORDS and not r["by_words"]


def search_floor(rows, margin):
    """The highest step of the ladder at most `margin` times below the lowest best estimate
    of a question found in a top 10 (none when it would not be above every made-up query)."""
    found = [r["best_estimate"] for r in rows
             if r["role"] == "question" and r["place"] is not None and r["place"] < 10]
    lowest = min(found, default=1.0)
    floor = max((f for f in LADDER if f <= lowest / margin), default=LADDER[0])
    worst = max((r["best_estimate"] for r in rows if made_up(r)), default=0.0)
    if floor <= worst:
        sys.exit(f"no search floor: a made-up query reaches {worst:.4f}, a found question "
                 f"{lowest:.4f}")
    return floor


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


def weights_doc(models, thresholds=None):
    doc = {"signals": SIGNALS, "query_signals": QUERY_SIGNALS}
    if thresholds:
        doc["thresholds"] = thresholds
    for side in SIDES:
        (cw, cb), (gw, gb) = models[side]
        doc[side] = {
            "candidate": {"bias": round(float(cb), 6), "weights": [round(float(w), 6) for w in cw]},
            "query": {"bias": round(float(gb), 6), "weights": [round(float(w), 6) for w in gw]},
        }
    return json.dumps(doc, indent=1) + "\n"


def main():
    global L2
    ap = argparse.ArgumentParser()
    ap.add_argument("features", help="the folder CAIRN_BENCH_FEATURES named")
    ap.add_argument("--l2", type=float, default=1.0, help="L2 penalty on standardized weights")
    ap.add_argument("--margin", type=float, default=3.0,
                    help="how many times below the lowest found question's estimate the "
                    "search floor stays")
    ap.add_argument("--noise", type=float, default=0.04,
                    help="the training negatives' noise the prompt threshold allows")
    ap.add_argument("--floor", type=float, help="search floor to report with (default: chosen)")
    ap.add_argument("--threshold", type=float, help="prompt threshold (default: chosen)")
    ap.add_argument("--write", action="store_true", help="write core/src/recall/ranker.json")
    ap.add_argument("--lopo", help="write each project's weights trained without it here")
    args = ap.parse_args()
    L2 = args.l2
    data = load(args.features)
    projects = sorted(data)
    print(f"projects: {', '.join(projects)}")
    for p in projects:
        roles = {}
        for q in data[p]:
            roles[q["role"]] = roles.get(q["role"], 0) + 1
        print(f"  {p}: " + ", ".join(f"{k} {v}" for k, v in sorted(roles.items())))

    judged = {side: {} for side in SIDES}
    lopo = {}
    for out in projects:
        rest = [p for p in projects if p != out]
        lopo[out] = {}
        for side in SIDES:
            models = train(data, rest, side)
            lopo[out][side] = models
            judged[side][out] = judge(data, out, side, models)

    # The thresholds: for each held-out project, chosen on the others' held-out relevance.
    chosen = {}
    for side in SIDES:
        for out in projects:
            others = [r for p in projects if p != out for r in judged[side][p]]
            chosen[(side, out)] = (
                args.floor if args.floor is not None else search_floor(others, args.margin),
                args.threshold if args.threshold is not None
                else prompt_threshold(others, args.noise))
        everything = [r for p in projects for r in judged[side][p]]
        chosen[(side, None)] = (search_floor(everything, args.margin),
                                prompt_threshold(everything, args.noise))

    # One setting for both kinds of search: the higher of the two.
    setting = {out: {"search": max(chosen[(s, out)][0] for s in SIDES),
                     "prompt": max(chosen[(s, out)][1] for s in SIDES)}
               for out in projects + [None]}
    if args.lopo:
        folder = pathlib.Path(args.lopo)
        folder.mkdir(parents=True, exist_ok=True)
        for out in projects:
            (folder / f"{out}.json").write_text(weights_doc(lopo[out], setting[out]))
        print(f"wrote each project's held-out weights and thresholds to {folder}")
    print("thresholds chosen without each project (search floor, prompt threshold): "
          + ", ".join(f"{p} {setting[p]['search']:g} {setting[p]['prompt']:g}"
                      for p in projects)
          + f"; shipped {setting[None]['search']:g} {setting[None]['prompt']:g}")

    for side in SIDES:
        print(f"\n## {side}\n")
        rows_all = [r for p in projects for r in judged[side][p]]
        qs = [r for r in rows_all if r["role"] == "question"]
        # The relevance a prompt's memories get (the product), and the candidate estimate
        # alone, which a search asked on purpose shows.
        for what, key in (("relevance", "r"), ("candidate estimate (a search's relevance)", "p")):
            for name, sel in (("every candidate", None), ("top 10 by order", 10)):
                probs, labels = [], []
                for r in qs:
                    if sel is None:
                        probs.extend(r[key]), labels.extend(r["labels"])
                    else:
                        top = np.argsort(-r[key], kind="stable")[:sel]
                        probs.extend(r[key][top]), labels.extend(r["labels"][top])
                rel, ece = reliability(probs, labels)
                print(f"reliability of the held-out {what}, the projects' questions, {name}: "
                      f"ECE {ece:.4f} over {len(probs)}")
                for b, n, pred, seen in rel:
                    print(f"    {b}  n={n:<7} predicted {pred:.3f}  observed {seen:.3f}")
        # Over all held-out queries, each query's best against "has a relevant candidate".
        best = [r["best"] for r in rows_all if r["role"] != "nonsense"]
        answered = [1.0 if r["role"] == "question" and r["place"] is not None and r["place"] < 1
                    else 0.0 for r in rows_all if r["role"] != "nonsense"]
        rel, ece = reliability(best, answered)
        print(f"reliability of each query's best relevance (questions and negatives; "
              f"observed: its best is the memory asked about): ECE {ece:.4f} over {len(best)}")
        for b, n, pred, seen in rel:
            print(f"    {b}  n={n:<7} predicted {pred:.3f}  observed {seen:.3f}")

        nonsense = sorted(((r["best_estimate"], r["query"], p) for p in projects
                           for r in judged[side][p] if made_up(r)), reverse=True)
        print("made-up queries' best candidate estimate (held out), highest first: "
              + ", ".join(f"{b:.1e} {q!r} ({p})" for b, q, p in nonsense[:6]))

        print("\n| project (questions) | floor | BM25-OR | RRF k=60 | learned | learned, floor "
              "applied | threshold | prompt hit rate | noise: other projects' questions | "
              "noise: everyday, held out | noise: everyday, train |")
        print("| --- | ---: | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |")
        tot = {k: [] for k in ("bm25", "fusion", "learned", "floored")}
        ptot = {"hit": [0, 0], "other": [0, 0], "held_out": [0, 0], "train": [0, 0]}
        for p in projects:
            floor, t = setting[p]["search"], setting[p]["prompt"]
            rows = judged[side][p]
            qs = [r for r in rows if r["role"] == "question"]
            cols = {
                "bm25": [r["bm25"] for r in qs], "fusion": [r["fusion"] for r in qs],
                "learned": [r["place"] for r in qs],
                "floored": [None if r["best_estimate"] < floor else r["place"] for r in qs],
            }
            for k in tot:
                tot[k].extend(cols[k])
            hit, other, held, tr = prompt_figures(rows, t)
            counts = {role: [r for r in rows if r["role"] == role]
                      for role in ("other", "held_out", "train")}
            ptot["hit"][0] += sum(1 for r in qs if r["hit_at"] >= t)
            ptot["hit"][1] += len(qs)
            for role, rs in counts.items():
                ptot[role][0] += sum(1 for r in rs if r["best"] >= t)
                ptot[role][1] += len(rs)
            print(f"| {p} ({len(qs)}) | {floor:.2f} | " + " | ".join(
                cell(figures(cols[k])) for k in ("bm25", "fusion", "learned", "floored"))
                + f" | {t:.2f} | {hit:.3f} | {other:.3f} | {held:.3f} | {tr:.3f} |")
        frac = lambda k: f"{ptot[k][0] / max(ptot[k][1], 1):.3f} ({ptot[k][0]}/{ptot[k][1]})"
        print(f"| all ({len(tot['bm25'])}) | | " + " | ".join(
            cell(figures(tot[k])) for k in ("bm25", "fusion", "learned", "floored"))
            + f" | | {frac('hit')} | {frac('other')} | {frac('held_out')} | {frac('train')} |")

        print("\ntargets on held-out projects (floor applied):")
        for p in projects:
            floor = setting[p]["search"]
            qs = [r for r in judged[side][p] if r["role"] == "question"]
            l5, l10, _ = figures([None if r["best_estimate"] < floor else r["place"] for r in qs])
            f5, f10, _ = figures([r["fusion"] for r in qs])
            b5, b10, _ = figures([r["bm25"] for r in qs])
            print(f"  {p:<10} r@5 {l5 - f5:+.3f} vs fusion (≥ +0.03: "
                  f"{'met' if l5 - f5 >= 0.03 - 1e-9 else 'missed'}); r@10 {l10:.3f} vs "
                  f"BM25 {b10:.3f}, fusion {f10:.3f} "
                  f"({'met' if l10 >= max(b10, f10) - 1e-9 else 'missed'})")
        a5, _, amrr = figures(tot["floored"])
        print(f"  all: r@5 {a5:.3f} (≥ 0.83), MRR@10 {amrr:.3f} (≥ 0.74)")

        print("\nprompt recall over the ladder (all held-out projects; thresholds not chosen):")
        for t in LADDER[7:22]:
            hs = [prompt_figures(judged[side][p], t) for p in projects]
            allrows = [r for p in projects for r in judged[side][p]]
            qn = [r for r in allrows if r["role"] == "question"]
            hit = sum(1 for r in qn if r["hit_at"] >= t) / len(qn)
            print(f"  {t:.2f}: hit {hit:.3f}; noise other "
                  f"{share([r for r in allrows if r['role'] == 'other'], t):.3f}, everyday held "
                  f"out {share([r for r in allrows if r['role'] == 'held_out'], t):.3f}, train "
                  f"{share([r for r in allrows if r['role'] == 'train'], t):.3f}; per-project hit "
                  + " ".join(f"{h[0]:.2f}" for h in hs))
        floor, t = chosen[(side, None)]  # this side's own choice
        print(f"\nshipped thresholds ({side}, the same rules on every project's held-out "
              f"relevance): search.min_relevance {floor:g}, recall.min_relevance {t:g}")
        noisy = sorted(((r["best"], r["role"], r["query"], p, r["from"]) for p in projects
                        for r in judged[side][p]
                        if r["role"] in ("other", "held_out") and r["best"] >= setting[p]["prompt"]),
                       reverse=True)
        print(f"negatives over their project's threshold ({len(noisy)}):")
        for b, role, q, p, frm in noisy[:40]:
            print(f"  {b:.3f} {role} in {p}" + (f" (from {frm})" if role == "other" else "")
                  + f": {q}")

    final = {side: train(data, projects, side) for side in SIDES}
    for side in SIDES:
        (cw, cb), (gw, gb) = final[side]
        print(f"\n{side} (all projects): candidate bias {cb:+.3f}; "
              + ", ".join(f"{s} {w:+.3f}" for s, w in zip(SIGNALS, cw)))
        print(f"  query bias {gb:+.3f}; "
              + ", ".join(f"{s} {w:+.3f}" for s, w in zip(QUERY_SIGNALS, gw)))
    if args.write:
        path = pathlib.Path(__file__).resolve().parents[2] / "core/src/recall/ranker.json"
        path.write_text(weights_doc(final))
        print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
