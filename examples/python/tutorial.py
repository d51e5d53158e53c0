"""dpattn from Python, end to end: DP cross-attention over a private document.

    pip install ./python matplotlib
    python examples/python/tutorial.py [--out dp_utility.png] [--n 20000]

1. A synthetic private document: ``n`` positions whose key and value rows belong to 16
   topics, and 16 public queries, each aimed at one topic (``d = 64``).
2. One session for the document (privacy unit: one token) with a ledger of (8, 1e-5):
   an output-perturbation release of the 16 answers, then a KV-sketch release answered for
   the same queries (and any later ones, at no further cost); the ledger after each.
3. A release the remaining budget cannot pay for is refused, and nothing is charged.
4. A privacy-utility curve: relative error against exact attention for ε from 0.5 to 8,
   for both mechanisms and the query-blind baseline mean(V), drawn to a PNG with
   matplotlib. Each point of the curve is its own experiment with its own session; a
   deployment has one budget per document and spends it as in step 2.
"""

import argparse
import sys

import numpy as np

import dpattn

D = 64
TOPICS = 16
KEY_NORM = 3.0  # public bounds on the rows' L2 norms (rows beyond them are clamped)
VALUE_NORM = 1.0
SCALE = 1.0 / np.sqrt(D)
DELTA = 1e-6


def document(n, rng):
    """Keys: a topic direction plus noise; values: the topic's value direction plus noise."""
    topic_keys = rng.standard_normal((TOPICS, D))
    topic_keys *= KEY_NORM / np.linalg.norm(topic_keys, axis=1, keepdims=True)
    topic_values = rng.standard_normal((TOPICS, D))
    topic_values *= 0.8 * VALUE_NORM / np.linalg.norm(topic_values, axis=1, keepdims=True)
    topic = rng.integers(0, TOPICS, size=n)
    keys = 0.8 * topic_keys[topic] + 0.05 * rng.standard_normal((n, D))
    values = topic_values[topic] + 0.02 * rng.standard_normal((n, D))
    queries = topic_keys.copy()  # one public query per topic
    return queries, keys, values


def exact_attention(q, k, v):
    """NumPy float64 softmax attention, the reference."""
    logits = SCALE * q @ k.T
    w = np.exp(logits - logits.max(axis=1, keepdims=True))
    return (w / w.sum(axis=1, keepdims=True)) @ v


def rel_error(estimate, exact):
    return float(np.mean(np.linalg.norm(estimate - exact, axis=1) / np.linalg.norm(exact, axis=1)))


def release_both(session, q, k, v, epsilon):
    """One output-perturbation release and one KV-sketch release at `epsilon` each."""
    out, sigma = dpattn.output_perturbation(
        session, q.astype(np.float32), k.astype(np.float32), v.astype(np.float32),
        key_norm=KEY_NORM, value_norm=VALUE_NORM, epsilon=epsilon, delta=DELTA, scale=SCALE)
    sketch = dpattn.KvSketch.release(
        session, k, v, key_norm=KEY_NORM, value_norm=VALUE_NORM, scale=SCALE, features=1024,
        epsilon=epsilon, delta=DELTA)
    return out.astype(np.float64), sketch.answer(q), float(sigma)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="dp_utility.png", help="where to write the plot")
    parser.add_argument("--n", type=int, default=20000, help="positions in the document")
    args = parser.parse_args()
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("this tutorial draws its curve with matplotlib: pip install matplotlib")

    rng = np.random.default_rng(2026)  # the synthetic data only; every noise key is fresh
    q, k, v = document(args.n, rng)
    exact = exact_attention(q, k, v)
    print(f"document: {args.n} positions x {D}; {len(q)} public queries")

    # 1-2. One document, one session, one budget.
    session = dpattn.Session(dpattn.Ledger.approx("token", epsilon=8.0, delta=1e-5))
    op, kv, sigma = release_both(session, q, k, v, epsilon=2.0)
    print(f"output perturbation at eps=2: rel. error {rel_error(op, exact):.3f} (sigma {sigma:.2e})")
    print(f"KV sketch at eps=2:           rel. error {rel_error(kv, exact):.3f}")
    print(f"ledger: spent {session.ledger.spent}, remaining {session.ledger.remaining}")

    # 3. Over budget: refused before any noise is drawn, nothing charged.
    try:
        release_both(session, q, k, v, epsilon=5.0)
    except dpattn.DpattnError as e:
        print(f"refused ({e.status}): {e}")
    print(f"ledger still: spent {session.ledger.spent}, {session.ledger.charges} charges")

    # 4. The privacy-utility curve.
    epsilons = [0.5, 1.0, 2.0, 4.0, 8.0]
    curve = {"output perturbation (16 queries)": [], "KV sketch (any number of queries)": []}
    for eps in epsilons:
        s = dpattn.Session(dpattn.Ledger.approx("token", epsilon=2 * eps, delta=1e-5))
        op, kv, _ = release_both(s, q, k, v, eps)
        curve["output perturbation (16 queries)"].append(rel_error(op, exact))
        curve["KV sketch (any number of queries)"].append(rel_error(kv, exact))
    baseline = rel_error(np.broadcast_to(v.mean(axis=0), exact.shape), exact)
    print("eps    " + "  ".join(f"{e:>6}" for e in epsilons))
    for name, errs in curve.items():
        print(f"{name}: " + "  ".join(f"{x:6.3f}" for x in errs))
    print(f"mean(V), no release: {baseline:.3f}")

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, errs in curve.items():
        ax.plot(epsilons, errs, marker="o", label=name)
    ax.axhline(baseline, color="gray", linestyle="--", label="mean(V) (query-blind)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("epsilon (delta = 1e-6)")
    ax.set_ylabel("relative error vs exact attention")
    ax.set_title(f"DP cross-attention, n = {args.n}, d = {D}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
