"""Checks for chapter 13 (predict, then run).

13.1 compares the learner's least squares (``fit_link(counts, seconds)``: the parameters that
minimise the squared relative errors, and their standard errors) with the solution of the normal
equations worked out here, on measurements made up here for a link drawn at random every run
(other rates, latencies and costs per message than the chapter's). 13.2 compares the learner's
round model (``sync_seconds``) with the closed forms written out here (``_round_seconds``) for the
four algorithms and random sizes, workers, delays and parameters. Plain Python: nothing starts.
Neither takes its expected values from ``dtfkit.recipes.predict``: an answer that called it would
be compared with itself.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence

import numpy as np

from dtfkit.course.check._core import CheckResult, exercise, failed, is_number, passed
from dtfkit.i18n import N_, _

ALGORITHMS = ("ps", "sharded_ps", "ring", "tree")
FULL_TREES = (3, 7, 15)  # n = 2^k - 1: every parent has two children, every leaf the same depth
# α, κ, β, γ of the passing lines: 100 µs a round, 200 µs a message, 1 Gbit/s, 1 ns per byte added.
FIXED_LINK = (100e-6, 200e-6, 8e-9, 1e-9)


def _depth(n: int) -> int:
    return int(math.log2(n + 1)) - 1


def _round_counts(algorithm: str, n: int, size: float) -> tuple[float, float, float, float, float]:
    """Along the critical path of the round model: rounds (α and d each), messages (κ), bytes through
    the links on the path (β), bytes added (γ)."""
    if algorithm == "ps":  # n messages into ps:0's link, one add of n gradients, n messages out
        return 2, 2 * n, 2 * n * size, n * size, 2
    if algorithm == "sharded_ps":  # n - 1 slices each way on every link; a shard of n slices added
        return 2, 2 * (n - 1), 2 * (n - 1) * size / n, size, 2
    if algorithm == "ring":  # 2(n - 1) rounds of one chunk; n - 1 adds of two chunks
        return 2 * (n - 1), 2 * (n - 1), 2 * (n - 1) * size / n, 2 * (n - 1) * size / n, 2 * (n - 1)
    depth = _depth(n)  # tree: up, two children into each parent; down, a parent to its two children
    return 2 * depth, 4 * depth, 4 * depth * size, 3 * depth * size, 2 * depth


def _round_seconds(algorithm: str, n: int, size: float, d: float, params: Sequence[float]) -> float:
    alpha, kappa, beta, gamma = params
    rounds, messages, link_bytes, added, hops = _round_counts(algorithm, n, size)
    return rounds * alpha + messages * kappa + link_bytes * beta + added * gamma + hops * d


def _relative_lstsq(counts: np.ndarray, seconds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The normal equations of the row-scaled problem, and σ²(AᵀA)⁻¹'s diagonal for the errors."""
    a = counts / seconds[:, None]
    gram = a.T @ a
    params = np.linalg.solve(gram, a.T @ np.ones(len(seconds)))
    residual = np.ones(len(seconds)) - a @ params
    sigma2 = float(residual @ residual) / (len(seconds) - counts.shape[1])
    return params, np.sqrt(np.diag(sigma2 * np.linalg.inv(gram)))


def _plain_lstsq(counts: np.ndarray, seconds: np.ndarray) -> np.ndarray:
    return np.linalg.solve(counts.T @ counts, counts.T @ seconds)


def _draw_link(rng: random.Random) -> tuple[float, float, float, float]:
    """A link and a TensorFlow never shown in the chapter: α 20-900 µs, κ 10-400 µs, a rate of
    30 Mbit/s to 3 Gbit/s, adds at 0.3-3 ns per byte."""
    return (
        rng.uniform(20e-6, 900e-6),
        rng.uniform(10e-6, 400e-6),
        8 / rng.uniform(30e6, 3e9),
        rng.uniform(0.3e-9, 3e-9),
    )


def _draw_runs(rng: random.Random, count: int) -> list[tuple[str, int, float]]:
    runs = []
    for i in range(count):
        algorithm = ALGORITHMS[i % len(ALGORITHMS)]  # every algorithm, so every parameter is seen
        n = rng.choice(FULL_TREES) if algorithm == "tree" else rng.randint(2, 12)
        runs.append((algorithm, n, float(4 * n * rng.randint(50, 2_000_000))))
    return runs


def _as_floats(value: object, length: int) -> list[float] | None:
    try:
        values = [float(v) for v in value]  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        return None
    return values if len(values) == length and all(math.isfinite(v) for v in values) else None


@exercise("13.1", "Fit the link yourself", reads=("counts", "seconds"), varies=N_("measurements"))
def fit_link(answer: Callable, *, hidden: bool = False) -> CheckResult:
    """Compare ``answer(counts, seconds)`` (``(params, stderrs)``, 4 each) with the least squares
    of the squared relative errors, solved here from the normal equations, on runs priced with a
    link drawn every time (more runs and noisier when hidden). Plain Python: nothing starts.

    Example::

        check.ch13.fit_link(fit_link)
    """
    rng = random.Random()
    for attempt in range(3 if hidden else 2):
        truth = _draw_link(rng)
        runs = _draw_runs(rng, rng.randint(16, 40) if hidden else rng.randint(12, 20))
        counts = np.array([_round_counts(a, n, s)[:4] for a, n, s in runs])
        exact = counts @ np.array(truth)
        noise = 0.0 if attempt == 0 else (0.08 if hidden else 0.04)
        seconds = exact * np.array([1 + rng.gauss(0, noise) for _ in runs])
        want, want_err = _relative_lstsq(counts, seconds)
        got = answer([list(map(float, row)) for row in counts], [float(t) for t in seconds])
        if not isinstance(got, tuple | list) or len(got) != 2:
            return failed(
                _("return two lists, the 4 parameters and their 4 standard errors, not {got!r}").format(
                    got=got
                ),
                _("end with `return params, stderrs`"),
            )
        params, errors = _as_floats(got[0], 4), _as_floats(got[1], 4)
        if params is None or errors is None:
            return failed(
                _(
                    "the parameters and their standard errors must be 4 finite numbers each, not {got!r}"
                ).format(got=got),
                _("return params, stderrs: α, κ, β and γ in that order"),
            )
        if not np.allclose(params, want, rtol=1e-6, atol=1e-15):
            hint = _("divide each row of counts, and its time, by the measured time before solving")
            if noise and np.allclose(params, _plain_lstsq(counts, seconds), rtol=1e-6, atol=1e-15):
                hint = _(
                    "these are the parameters of the plain least squares: the slow runs then outweigh the fast ones; {hint}"
                ).format(hint=hint)
            return failed(
                _(
                    "for {runs} runs ({noise}) you found α={alpha:.4g} s, κ={kappa:.4g} s, β={beta:.4g} s/B, γ={gamma:.4g} s/B; the least squares of the relative errors gives α={want_alpha:.4g}, κ={want_kappa:.4g}, β={want_beta:.4g}, γ={want_gamma:.4g}"
                ).format(
                    runs=len(runs),
                    noise=_("exact times") if not noise else _("times with noise"),
                    alpha=params[0],
                    kappa=params[1],
                    beta=params[2],
                    gamma=params[3],
                    want_alpha=want[0],
                    want_kappa=want[1],
                    want_beta=want[2],
                    want_gamma=want[3],
                ),
                hint,
            )
        if noise and not np.allclose(errors, want_err, rtol=1e-3, atol=0):
            return failed(
                _(
                    "your parameters are right, but your standard errors {got} are not σ²(AᵀA)⁻¹'s {want}"
                ).format(
                    got=", ".join(f"{e:.3g}" for e in errors), want=", ".join(f"{e:.3g}" for e in want_err)
                ),
                _(
                    "σ² is the sum of the squared relative residuals over (runs - 4); A is the scaled counts; take the square root of each diagonal entry"
                ),
            )
    # The passing line is the same every run: the answer's fit of fixed noisy runs on a 1 Gbit/s link.
    fixed = random.Random(13)
    runs = _draw_runs(fixed, 24)
    counts = np.array([_round_counts(a, n, s)[:4] for a, n, s in runs])
    seconds = counts @ np.array(FIXED_LINK) * np.array([1 + fixed.gauss(0, 0.04) for _ in runs])
    found = answer([list(map(float, row)) for row in counts], [float(t) for t in seconds])
    rate = _as_floats(found[0], 4) if isinstance(found, tuple | list) and len(found) == 2 else None
    if rate is None:
        return failed(
            _("return params, stderrs: α, κ, β and γ in that order"), _("end with `return params, stderrs`")
        )
    return passed(
        _(
            "your least squares found every drawn link again; for 24 runs on a 1 Gbit/s link (125 MB/s) with 4% noise it finds {found:.1f} MB/s"
        ).format(found=1e-6 / rate[2])
    )


def _draw_case(rng: random.Random, algorithm: str, hidden: bool) -> tuple[str, int, float, float, tuple]:
    n = rng.choice(FULL_TREES) if algorithm == "tree" else rng.randint(2, 64 if hidden else 16)
    size = float(4 * n * rng.randint(1, 10**6))
    return algorithm, n, size, rng.uniform(0, 0.03), _draw_link(rng)


@exercise(
    "13.2",
    "The round model",
    reads=(
        "algorithm",
        "n",
        "size_bytes",
        "d_s",
        "alpha_s",
        "kappa_s",
        "beta_s_per_byte",
        "gamma_s_per_byte",
    ),
    varies=N_("algorithms, sizes and links"),
)
def round_model(sync_seconds: Callable, *, hidden: bool = False) -> CheckResult:
    """Compare ``sync_seconds(algorithm, n, size_bytes, d_s, alpha_s, kappa_s, beta_s_per_byte,
    gamma_s_per_byte)`` with the round model's closed forms (``_round_seconds``) for the four
    algorithms (trees of 3, 7 or 15 workers) and random sizes, delays and links.

    Example::

        check.ch13.round_model(sync_seconds)
    """
    rng = random.Random()
    cases = [_draw_case(rng, a, hidden) for a in ALGORITHMS]
    cases += [_draw_case(rng, rng.choice(ALGORITHMS), hidden) for _draw in range(40 if hidden else 16)]
    for algorithm, n, size, d, params in cases:
        want = _round_seconds(algorithm, n, size, d, params)
        got = sync_seconds(algorithm, n, size, d, *params)
        if not (is_number(got) and math.isclose(got, want, rel_tol=1e-6)):
            rounds, messages, link_bytes, added, _hops = _round_counts(algorithm, n, size)
            return failed(
                _(
                    "for {algorithm!r} with n={n}, S={size:,.0f} bytes, d={d_ms:.3g} ms you predicted {got!r} s; the round model gives {want:.6g} s"
                ).format(algorithm=algorithm, n=n, size=size, d_ms=d * 1000, got=got, want=want),
                _(
                    "its critical path has {rounds:g} rounds (α + d each), {messages:g} messages (κ), {link_bytes:,.0f} bytes through the links on its path (β) and {added:,.0f} bytes added (γ)"
                ).format(rounds=rounds, messages=messages, link_bytes=link_bytes, added=added),
            )
    sizes = (2_800, 2_800_000)
    times = {
        (a, size): sync_seconds(a, 7, float(size), 0.001, *FIXED_LINK)
        for a in ("ring", "tree")
        for size in sizes
    }
    return passed(
        _(
            "your times match the round model in {count} cases; for 7 workers, d = 1 ms and 1 Gbit/s, the ring takes {ring_small:.2f} ms and the tree {tree_small:.2f} ms at 2,800 bytes, and {ring_large:.1f} ms against {tree_large:.1f} ms at 2,800,000 bytes"
        ).format(
            count=len(cases),
            ring_small=1000 * times["ring", sizes[0]],
            tree_small=1000 * times["tree", sizes[0]],
            ring_large=1000 * times["ring", sizes[1]],
            tree_large=1000 * times["tree", sizes[1]],
        )
    )
