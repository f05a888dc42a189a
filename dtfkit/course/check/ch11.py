"""Checks for chapter 11 (communication up close).

11.1 compares the learner's byte formula for a compressed gradient with the payload's size
worked out here from its tensors' dtypes and lengths (``_payload_bytes``) for many sizes, then
with the bytes TensorFlow moved in a real training step (its trace's partition graphs), which
must also agree with ``_payload_bytes``. 11.2 compares the learner's α–β times with the model
written out here (``_model_seconds``) for random methods, worker counts, sizes, latencies and
rates (plain Python: no cluster starts). Neither takes its expected values from the library's
own formulas (``compression.expected_compressed_bytes``, ``alpha_beta.alpha_beta_time``): an
answer that calls them would otherwise be compared with itself.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

from dtfkit.course.check._core import CheckResult, cluster, exercise, failed, is_number, passed
from dtfkit.i18n import N_, _
from dtfkit.recipes import alpha_beta as model, compression

TRACED_HIDDEN_UNITS = range(1, 25)
"""The traced model's hidden units, drawn each run: an MLP of 85 to 1 810 floats, a size the chapter never
prints (its softmax regression has 650 floats, its MLP 38 410) and that no formula case of the run uses."""

# Gradient sizes the chapter prints (Sections 1, 3 and 4, the exercise's own output): no checked case uses
# them, so an answer that transcribes the chapter's tables finds none of its entries asked.
PRINTED_FLOATS = frozenset({650, 1_200, 38_410, 300_000})

# What each method puts on the wire (compression.compress): (dtype of each payload tensor, its length).
# Item sizes as TensorFlow stores them: float32 and int32 4 bytes, float16 and bfloat16 2, uint8 1.
_ITEM_BYTES = {"float32": 4, "int32": 4, "float16": 2, "bfloat16": 2, "uint8": 1}


def _payload_tensors(method: str, floats: int, k: int | None) -> list[tuple[str, int]]:
    if method == "none":
        return [("float32", floats)]
    if method in ("fp16", "bf16"):
        return [("float16" if method == "fp16" else "bfloat16", floats)]
    if method == "topk":
        return [("float32", int(k or 0)), ("int32", int(k or 0))]  # values, then their positions
    if method == "sign":
        return [("uint8", -(-floats // 8)), ("float32", 1)]  # signs packed 8 to a byte; the scale
    raise ValueError(f"method must be one of {compression.METHODS}, not {method!r}")


def _payload_bytes(method: str, floats: int, k: int | None) -> int:
    """Bytes of the tensors a worker sends ``ps:0``, from their dtypes and lengths."""
    return sum(_ITEM_BYTES[dtype] * length for dtype, length in _payload_tensors(method, floats, k))


def _model_terms(method: str, n: int, size: float) -> tuple[int, float]:
    """The rounds of messages, and the bytes the busiest link carries each way."""
    rounds = {"ps": 2, "sharded_ps": 2, "ring": 2 * (n - 1)}[method]
    return rounds, {"ps": n * size, "sharded_ps": (n - 1) * size / n, "ring": (n - 1) * size / n}[method]


def _model_seconds(method: str, n: int, size: float, alpha: float, beta: float) -> float:
    """The α–β model of Section 2: a latency per round, the busiest link's bytes times β."""
    rounds, busiest_link_each_way = _model_terms(method, n, size)
    return rounds * alpha + 2 * busiest_link_each_way * beta


def _ps_ring_crossover(n: int, alpha: float, beta: float) -> float:
    """Where the model's ps and ring take the same time (n > 2): 2α + 2nSβ = 2(n - 1)(α + Sβ/n)."""
    return n * (n - 2) * alpha / ((n * n - n + 1) * beta)


def _bytes_hint(method: str, floats: int, k: int | None, got: object) -> str:
    """What a typical wrong answer forgot, in words (never the formula)."""
    if not is_number(got):
        return _("return a number of bytes (an int)")
    half, full = 2 * floats, 4 * floats
    if got == floats:
        return _("you counted numbers, not bytes: how many bytes is one number in this format?")
    if method in ("fp16", "bf16"):
        if got == full:
            return _("that is the float32 gradient: how many bytes does a 16-bit number take?")
        return _("a 16-bit float takes 2 bytes; the worker sends every entry")
    if method == "topk" and k is not None:
        if got == 4 * k:
            return _("top-k sends the k values, but ps:0 must also learn *which* entries they are")
        if got in (full, half, 8 * floats):
            return _("top-k sends only k entries, not the whole gradient")
        return _("top-k sends k values and k positions, each a 4-byte number")
    if method == "sign":
        bits = floats / 8
        if got in (math.floor(bits), math.ceil(bits)):
            return _(
                "the signs alone lose the gradient's size: the worker sends one float32 number besides them"
            )
        if got in (bits + 4, math.floor(bits) + 4):
            return _("bits travel in whole bytes: 8 signs a byte, and the last byte may be only partly used")
        if got in (full, half):
            return _("each entry becomes one bit, packed 8 to a byte")
        return _("one bit per entry, packed 8 to a byte (round up), plus one float32 scale")
    if method == "none" and got == half:
        return _("method 'none' sends the float32 gradient unchanged")
    return _("look at Section 4's table: what does the worker put on the wire for this method?")


def _traced_sizes() -> frozenset[int]:
    """Every gradient size the traced model can have (kept out of the formula cases)."""
    return frozenset(compression.model_floats(h) for h in TRACED_HIDDEN_UNITS)


def _cases(rng: random.Random, hidden: bool) -> list[tuple[str, int, int | None]]:
    """Every method at gradient sizes drawn fresh (one of them not a multiple of 8), none the chapter
    prints and none the traced model can have."""
    draws = [
        lambda: rng.randint(9, 999),
        lambda: 4 * rng.randint(2, 5000) + rng.randint(1, 3),
        lambda: rng.randint(1_000, 99_999),
        lambda: rng.randint(100_000, 10**6),
    ]
    if hidden:
        draws += [lambda: rng.randint(1, 7), lambda: rng.randint(10**6, 10**8)]
    avoid = PRINTED_FLOATS | _traced_sizes()
    floats = []
    for draw in draws:
        f = draw()
        while f in avoid:
            f = draw()
        floats.append(f)
    out: list[tuple[str, int, int | None]] = []
    for f in floats:
        for method in compression.METHODS:
            k = rng.randint(1, f) if method == "topk" else None
            out.append((method, f, k))
    return out


@exercise(
    "11.1",
    "Bytes of a compressed gradient",
    reads=("method", "floats", "k"),
    varies=N_("methods, sizes and k"),
)
def compressed_bytes(bytes_to_ps: Callable, *, hidden: bool = False) -> CheckResult:
    """Compare ``bytes_to_ps(method, floats, k)`` (the bytes one worker sends ``ps:0`` per step;
    ``k`` is ``None`` except for ``"topk"``) with the formulas for every method and many sizes,
    then with a real step of an MLP on the digits whose size the check draws (asked for the first time
    there), traced on 1 ps + 1 worker. No size the chapter prints is asked.

    Example::

        check.ch11.compressed_bytes(bytes_to_ps)
    """
    rng = random.Random()
    cases = _cases(rng, hidden)
    for method, floats, k in cases:
        want = _payload_bytes(method, floats, k)
        got = bytes_to_ps(method, floats, k)
        if got != want:
            where = f"method {method!r}, {floats} floats" + (f", k={k}" if k is not None else "")
            return failed(
                _("for {where} you predicted {got!r} bytes; the worker sends {want}").format(
                    where=where, got=got, want=want
                ),
                _bytes_hint(method, floats, k, got),
            )
    # The traced model's size is asked here for the first time: the trace is where an answer that is
    # right for the cases above and wrong for this size (a table, a special case) fails.
    units = rng.choice(TRACED_HIDDEN_UNITS)
    floats = compression.model_floats(units)
    k = rng.randint(2, floats // 4)
    methods = ["bf16", "topk"] if hidden else ["topk", "sign"]
    # worker:0 is the client here: one process fewer to start than a separate client.
    with cluster(ps=1, workers=1) as c:
        (runs,) = c.run(
            compression.train_methods,
            args=(methods,),
            kwargs={"workers": 1, "steps": 3, "k": k, "hidden": units},
            on="worker:0",
            timeout=240,
        ).values()
    traced = {}
    for run in runs:
        k_run = k if run["method"] == "topk" else None
        traced[run["method"]] = run["bytes_to_ps"]["worker:0"]
        sent = {"traced": traced[run["method"]], "method": run["method"], "floats": floats}
        if traced[run["method"]] != _payload_bytes(run["method"], floats, k_run):
            # TensorFlow moved other tensors than the payload this check counts: the kit is wrong, not you
            return failed(
                _(
                    "the check itself is wrong: the trace says worker:0 sent ps:0 {traced} bytes with {method!r} ({floats} floats, k={k_run}), but the payload's tensors {payload_tensors} make {payload_bytes} bytes (transfers: {run_transfers})"
                ).format(
                    **sent,
                    k_run=k_run,
                    payload_tensors=_payload_tensors(run["method"], floats, k_run),
                    payload_bytes=_payload_bytes(run["method"], floats, k_run),
                    run_transfers=run["transfers"],
                ),
                _("this is not your mistake: report this message to the course's maintainers"),
            )
        predicted = bytes_to_ps(run["method"], floats, k_run)
        if predicted != traced[run["method"]]:
            return failed(
                _(
                    "the trace says worker:0 sent ps:0 {traced} bytes with {method!r} ({floats} floats), you predicted {predicted!r}"
                ).format(**sent, predicted=predicted),
                _("does your function depend on anything but method, floats and k?")
                + " "
                + _bytes_hint(run["method"], floats, k_run, predicted),
            )
    return passed(
        _(
            "your formula matches every method for {case_count} gradient sizes the chapter never prints, and a real traced step of an MLP the check drew (with top-k's k drawn too): {methods}"
        ).format(case_count=len(cases) // len(compression.METHODS), methods=_(" and ").join(traced))
    )


def _times_hint(method: str, n: int, size: float, alpha: float, beta: float, got: object) -> str:
    """What a typical wrong α–β time forgot, in words (never the formula)."""
    if not is_number(got):
        return _("return a time in seconds (a float)")
    want = _model_seconds(method, n, size, alpha, beta)
    if math.isclose(got, 1000 * want, rel_tol=1e-6):
        return _("that is in milliseconds: return seconds")

    def near(value: float) -> bool:
        return math.isclose(got, value, rel_tol=1e-6)

    rounds, per_link = _model_terms(method, n, size)
    if near(rounds * alpha + per_link * beta):
        return _("the busiest link carries these bytes twice: once on the way in and once on the way out")
    if near(alpha + 2 * per_link * beta) or near(2 * per_link * beta):
        return _("count the rounds of messages that wait for one another: each pays the latency once")
    if method == "ring":
        if near(2 * alpha + 2 * per_link * beta):
            return _("the ring's messages wait for one another: how many rounds does it take?")
        if near(rounds * (alpha + size * beta)):
            return _("each ring message carries one chunk, not the whole gradient")
    if method == "ps" and near(2 * alpha + 2 * size * beta):
        return _("ps:0's link carries every worker's gradient in and a sum out to every worker")
    if method == "sharded_ps":
        if near(2 * (n - 1) * alpha + 2 * per_link * beta):
            return _("the sharded ps sends to every peer at once: its messages take 2 rounds, not the ring's")
        if near(2 * alpha + 2 * size * beta) or near(2 * alpha + 2 * n * size * beta):
            return _(
                "a worker's own shard never leaves its machine: only the other workers' slices cross its link"
            )
    return _("Section 2: the latency once per round of messages, plus the busiest link's bytes times β")


def _not_whole_ms(alpha: float) -> float:
    """``alpha`` moved off a whole number of milliseconds (the chapter prints 1 ms and 20 ms)."""
    return alpha + 1e-7 if math.isclose(alpha * 1000, round(alpha * 1000), abs_tol=1e-9) else alpha


@exercise(
    "11.2",
    "The α–β time of a synchronisation",
    reads=("method", "n", "size_bytes", "alpha_s", "beta_s_per_byte"),
    varies=N_("methods, sizes and links"),
)
def alpha_beta(sync_seconds: Callable, *, hidden: bool = False) -> CheckResult:
    """Compare ``sync_seconds(method, n, size_bytes, alpha_s, beta_s_per_byte)`` with the α–β model
    of Section 2 (``_model_seconds``) for the three methods and random n, sizes, α and β (more,
    and larger, when hidden). Plain Python: nothing starts.

    Example::

        check.ch11.alpha_beta(sync_seconds)
    """
    rng = random.Random()
    # Every case drawn: each method once (first), then random ones. The chapter's printed times
    # (n=3, S=1.2 MB, α of 1 and 20 ms, 100 Mbit/s) have a whole α in ms; these never do.
    # The first case of each method has latency and bytes of like weight (α of 5 to 50 ms, a link of 50
    # to 200 Mbit/s, S of 50 to 900 kB, as in the chapter but never its numbers): a wrong answer fails on
    # one where the hint can tell what it forgot.
    cases = [
        (
            method,
            rng.randint(3, 8),
            float(rng.randint(50_000, 900_000)),
            _not_whole_ms(rng.uniform(0.005, 0.05)),
            8 / rng.uniform(50e6, 200e6),
        )
        for method in model.METHODS
    ]
    for method in [rng.choice(model.METHODS) for _draw in range(30 if hidden else 12)]:
        n = rng.randint(2, 64 if hidden else 16)
        cases.append(
            (
                method,
                n,
                float(rng.choice([1, 4 * n]) * rng.randint(1, 10**6)),
                _not_whole_ms(10 ** rng.uniform(-6, -1)),
                8 / 10 ** rng.uniform(7, 11),
            )
        )
    for method, n, size, alpha, beta in cases:
        want = _model_seconds(method, n, size, alpha, beta)
        got = sync_seconds(method, n, size, alpha, beta)
        if not (is_number(got) and math.isclose(got, want, rel_tol=1e-6)):
            return failed(
                _(
                    "for {method!r} with n={n}, S={size:,.0f} bytes, α={alpha_1000:.4g} ms and 1/β={v_1e_6_beta:.4g} MB/s you predicted {got!r} s; the model gives {want:.6g} s"
                ).format(
                    method=method,
                    n=n,
                    size=size,
                    alpha_1000=alpha * 1000,
                    v_1e_6_beta=1e-6 / beta,
                    got=got,
                    want=want,
                ),
                _times_hint(method, n, size, alpha, beta, got),
            )
    crossover = _ps_ring_crossover(3, 0.02, 8e-8)
    return passed(
        _(
            "your times match the α–β model in {len_cases} cases (ps, sharded ps and ring, n up to {most_workers}); with them, n=3, α=20 ms and 12.5 MB/s, the ps and the ring take the same time at {crossover:,.0f} bytes"
        ).format(len_cases=len(cases), most_workers=max(c[1] for c in cases), crossover=crossover)
    )
