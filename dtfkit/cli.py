"""Command line: ``python -m dtfkit launch|export|demo|compat|cleanup|student-copies|...``.

Examples::

    python -m dtfkit launch --ps 2 --workers 2 distributed_mnist.py -- --is_sync=True
    python -m dtfkit demo
    python -m dtfkit compat --strategy MultiWorkerMirroredStrategy
    python -m dtfkit cleanup
    python -m dtfkit student-copies notebooks/ -o student/
    python -m dtfkit student-copies notebooks/ --format nbgrader -o course/source/
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path

from dtfkit.errors import DtfkitError, exit_code


def _script_and_counts(ns: argparse.Namespace) -> dict:
    """The script, its arguments (after an optional ``--``) and the task counts, as keywords."""
    extra = list(ns.script_args)
    if extra and extra[0] == "--":
        extra = extra[1:]
    counts = {job: getattr(ns, job) for job in ("ps", "workers", "chief", "evaluator")}
    return {"script": ns.script, "args": extra, **counts}


def _options(ns: argparse.Namespace, *names: str) -> dict:
    """The options ``names`` as keywords, named as the function they go to names them."""
    return {name: getattr(ns, name) for name in names}


def _launch(ns: argparse.Namespace) -> int:
    from dtfkit.launch_script import launch

    options = _options(ns, "network", "timeout", "show_tf_logs", "max_tasks", "ray")
    result = launch(**_script_and_counts(ns), **options)
    print(f"[dtfkit] {result.summary()}", flush=True)
    return 0 if result.ok else 1


def _demo(ns: argparse.Namespace) -> int:
    from dtfkit.demo import main

    return main(steps=ns.steps, sync=ns.sync)


def _cleanup(ns: argparse.Namespace) -> int:
    from dtfkit.engine.platform.state import cleanup

    print(cleanup(everything=ns.all, dry_run=ns.dry_run, keep_logs=ns.keep_logs))
    return 0


def _in_language(source: str, lang: str | None) -> str:
    """The ``lang`` edition of a folder of chapters, or of one chapter (``notebooks/zh_CN/...``)."""
    if lang is None:
        return source
    path = Path(source)
    if not path.exists():
        raise DtfkitError(f"{source} does not exist: name a folder of chapters (notebooks/) or one chapter")
    edition = path / lang if path.is_dir() else path.parent / lang / path.name
    if not edition.exists():
        raise DtfkitError(
            f"there is no {lang} edition of {source} ({edition} does not exist); the course has "
            "notebooks/zh_CN (python -m dtfkit translations build writes it)"
        )
    return str(edition)


@contextlib.contextmanager
def _from_the_checkout(command: str, extra: str) -> Iterator[None]:
    """Around an import of ``edition``, which lives in a checkout beside the package (it reads and writes the
    chapters): a missing ``edition`` or library of its ``extra`` becomes an error that says what to do."""
    try:
        yield
    except ModuleNotFoundError as missing:
        if (missing.name or "").partition(".")[0] != "edition":
            raise DtfkitError(
                f"{command}: {missing.name} is missing; install the builder's libraries: "
                f"python3 -m pip install -e '.[{extra}]'"
            ) from None
        raise DtfkitError(
            f"{command}: the edition builder is not part of the installed package (it reads and writes the "
            "chapters, README and docs of a checkout); run it from the root of a dtfkit checkout (git clone)"
        ) from None


def _student_copies(ns: argparse.Namespace) -> int:
    with _from_the_checkout("student-copies", "hub"):
        from edition.student import write_nbgrader_source, write_student_copies

    source = _in_language(ns.source, ns.lang)
    if ns.format == "nbgrader":
        written = write_nbgrader_source(
            source, ns.output, lock_others=ns.lock_other_cells, exercises_only=ns.exercises_only
        )
    else:
        written = write_student_copies(source, ns.output)
    for path in written:
        print(f"wrote {path}")
    if ns.format == "nbgrader":
        print(
            f"next: in the course folder whose 'source' folder is {ns.output}, run "
            "'nbgrader generate_assignment NAME' for each NAME above (see docs/nbgrader.md)"
        )
    return 0


def _translations(ns: argparse.Namespace) -> int:
    with _from_the_checkout("translations", "edition"):
        from edition import translate

    if ns.action == "extract":
        for chapter, (units, untranslated, fuzzy) in translate.extract(ns.lang).items():
            print(f"{chapter}: {units} units, {untranslated} untranslated, {fuzzy} fuzzy")
        return 0
    if ns.action == "build":
        for chapter, left in translate.build(ns.lang).items():
            print(f"{chapter}: built" + (f", {left} unit(s) left in English" if left else ""))
        return 0
    if ns.action == "todo":
        entries = translate.todo(ns.chapter, ns.lang, everything=ns.all)
        sys.stdout.write(json.dumps(entries, ensure_ascii=False, indent=1) + "\n")
        return 0
    if ns.action == "fill":
        try:
            with open(ns.file, encoding="utf-8") as f:
                entries = json.load(f)
        except OSError as error:
            raise DtfkitError(f"translations fill: cannot read {ns.file} ({error.strerror})") from None
        except ValueError as error:
            raise DtfkitError(
                f"translations fill: {ns.file} is not JSON ({error}); write what todo printed"
            ) from None
        print(f"{translate.fill(ns.chapter, entries, ns.lang)} translation(s) written")
        return 0
    found = translate.problems(ns.lang)
    for line in found:
        print(line)
    print(f"{len(found)} problem(s)" if found else f"the {ns.lang} edition is in step with the English")
    return 1 if found else 0


def _export(ns: argparse.Namespace) -> int:
    from dtfkit.kube.export import export_tfjob

    options = _options(ns, "image", "name", "namespace", "cpu", "memory", "gpus_per_worker")
    text = export_tfjob(**_script_and_counts(ns), **options)
    sys.stdout.write(text)
    return 0


def _classroom_bench(bench_args: list[str]) -> int:
    """The bench lives in the checkout, not in the package students install (``hubbench/``, run as root);
    ``main`` hands it every argument after ``classroom-bench`` unparsed."""
    try:
        from hubbench.__main__ import main as bench_main
    except ImportError:
        raise DtfkitError(
            "classroom-bench: the classroom bench is not part of the installed package; run it from the root "
            "of a dtfkit checkout (git clone, then: sudo python3 -m hubbench --help)"
        ) from None
    return bench_main(bench_args)


def _compat(ns: argparse.Namespace) -> int:
    from dtfkit.recipes.compat import kernel_side as compat

    table = compat.compatibility_table(
        ns.strategy or compat.STRATEGIES, ns.trainer or compat.TRAINERS, steps=ns.steps, timeout=ns.timeout
    )
    if ns.json:
        print(json.dumps(table.as_dict(), indent=1))
    else:
        print(table)
    return 0


def build_parser() -> argparse.ArgumentParser:
    from dtfkit.recipes.compat.task_side import STRATEGIES, TRAINERS

    parser = argparse.ArgumentParser(prog="python -m dtfkit", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser(
        "launch",
        help="run a TF1 script with --ps_hosts/--worker_hosts/--job_name/--task_index flags (as in Ye Hu's tutorial) as every task of a local cluster",
    )
    p.add_argument("--ps", type=int, default=1, help="number of ps tasks (default 1)")
    p.add_argument("--workers", type=int, default=2, help="number of worker tasks (default 2)")
    p.add_argument("--chief", type=int, default=0, help="1 to add a chief task")
    p.add_argument("--evaluator", type=int, default=0, help="1 to add an evaluator task")
    p.add_argument("--network", choices=["auto", "isolated", "host"], default="auto")
    p.add_argument("--timeout", type=float, default=None, help="seconds before every task is stopped")
    p.add_argument("--show-tf-logs", action="store_true", help="show TensorFlow's C++ start-up messages")
    p.add_argument(
        "--max-tasks",
        type=int,
        default=None,
        help="allow more tasks than this machine's limit (DTFKIT_MAX_TASKS)",
    )
    p.add_argument(
        "--ray",
        metavar="ADDRESS",
        default=None,
        help="run the tasks on a Ray cluster: its address (auto, ray://HEAD:10001, HEAD:6379), "
        "or 'simulated[:N]' for a simulated N-node cluster on this machine (pip install \"dtfkit[ray]\")",
    )
    p.add_argument("script", help="the script each task runs")
    p.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments after -- go to the script")
    p.set_defaults(func=_launch)

    e = sub.add_parser("export", help="write a manifest that runs a script on a cluster (Kubeflow TFJob)")
    esub = e.add_subparsers(dest="target", required=True)
    t = esub.add_parser(
        "tfjob",
        help="print a ConfigMap + Kubeflow TFJob (kubeflow.org/v1) manifest for kubectl apply -f -",
        description="Print a ConfigMap + Kubeflow TFJob manifest that runs SCRIPT, unmodified, with the "
        "--ps_hosts/--worker_hosts/--job_name/--task_index flags of Ye Hu's tutorial, on every replica "
        "(see docs/kubeflow.md). Try it offline: ... | python -m dtfkit.kube.simulate -",
    )
    t.add_argument("--ps", type=int, default=1, help="number of ps replicas (default 1)")
    t.add_argument("--workers", type=int, default=2, help="number of worker replicas (default 2)")
    t.add_argument("--chief", type=int, default=0, help="1 to add a Chief replica")
    t.add_argument("--evaluator", type=int, default=0, help="1 to add an Evaluator replica")
    t.add_argument(
        "--image", default=None, help="container image with Python, TensorFlow and what the script imports"
    )
    t.add_argument("--name", default=None, help="the TFJob's name (default: from the script's file name)")
    t.add_argument("--namespace", default="default", help="Kubernetes namespace (default: default)")
    t.add_argument("--cpu", default="1", help="CPU request of every replica (default 1)")
    t.add_argument("--memory", default="2Gi", help="memory request of every replica (default 2Gi)")
    t.add_argument("--gpus-per-worker", type=int, default=0, help="nvidia.com/gpu limit of chief and workers")
    t.add_argument("script", help="the script every replica runs")
    t.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments after -- go to the script")
    t.set_defaults(func=_export)

    d = sub.add_parser("demo", help="start 2 ps + 2 workers and train a digit classifier")
    d.add_argument("--steps", type=int, default=300)
    d.add_argument("--sync", action="store_true", help="synchronous training (SyncReplicasOptimizer)")
    d.set_defaults(func=_demo)

    k = sub.add_parser(
        "compat",
        help="which way to train (Keras 3 fit, custom loop, tf_keras, TF only) works under which tf.distribute strategy, "
        "found by running each on a local cluster",
        description="For every strategy x trainer, start the local cluster the strategy needs, train a linear model "
        "a few steps and print 'works' or the first line of the real error; also Keras 3's optimizer.iterations "
        "against the steps that ran. Run it against your own TensorFlow and Keras versions.",
    )
    k.add_argument("--strategy", action="append", choices=STRATEGIES, help="only this strategy (repeatable)")
    k.add_argument("--trainer", action="append", choices=TRAINERS, help="only this trainer (repeatable)")
    k.add_argument("--steps", type=int, default=40, help="training steps in each cell (default 40)")
    k.add_argument(
        "--timeout", type=float, default=120.0, help="seconds before a cell is stopped (default 120)"
    )
    k.add_argument("--json", action="store_true", help="print the table as JSON")
    k.set_defaults(func=_compat)

    c = sub.add_parser("cleanup", help="end processes left behind by a crashed notebook kernel")
    c.add_argument("--all", action="store_true", help="also end clusters whose owner is still running")
    c.add_argument("--dry-run", action="store_true", help="only say what would be done")
    c.add_argument("--keep-logs", action="store_true", help="keep the log folders")
    c.set_defaults(func=_cleanup)

    s = sub.add_parser(
        "student-copies",
        help="write notebooks with solutions stubbed and hidden checks removed, or nbgrader source notebooks",
    )
    s.add_argument("source", help="a folder of instructor notebooks, or one notebook")
    s.add_argument("-o", "--output", required=True, help="the folder to write the student copies to")
    s.add_argument(
        "--format",
        choices=["student", "nbgrader"],
        default="student",
        help="student: copies to hand out (default); nbgrader: source notebooks for nbgrader, with "
        "solutions, hidden tests and grading metadata, one assignment folder per notebook",
    )
    s.add_argument(
        "--exercises-only",
        action="store_true",
        help="nbgrader: keep only the exercises section (cells tagged dtfkit-exercise), which grades faster",
    )
    s.add_argument(
        "--lock-other-cells",
        action="store_true",
        help="nbgrader: mark every cell but the answers read-only (autograde restores them)",
    )
    s.add_argument(
        "--lang",
        default=None,
        help="the edition in this language: zh_CN reads SOURCE/zh_CN (the Chinese chapters) instead of SOURCE",
    )
    s.set_defaults(func=_student_copies)

    tr = sub.add_parser(
        "translations",
        help="the course in another language: update its catalogs, build its notebooks, check them",
        description="The English chapters are the source; each chapter's prose is kept in a gettext catalog "
        "(notebooks/locale/LANG/LC_MESSAGES/CHAPTER.po). extract: update the catalogs from the English; "
        "build: write notebooks/LANG/; check: list untranslated, fuzzy or stale units (exit 1 if any); "
        "todo CHAPTER: the units that need a translator, as JSON; fill CHAPTER FILE: write a todo list's "
        "translations back.",
    )
    tr.add_argument("action", choices=["extract", "build", "check", "todo", "fill"])
    tr.add_argument("chapter", nargs="?", help="todo, fill: a chapter's number (09) or name")
    tr.add_argument("file", nargs="?", help="fill: the JSON file of translations")
    tr.add_argument("--lang", default="zh_CN", help="the language (default zh_CN)")
    tr.add_argument("--all", action="store_true", help="todo: every unit, translated ones too (for a review)")
    tr.set_defaults(func=_translations)

    sub.add_parser(
        "classroom-bench",
        help="run a class of N students on a real JupyterHub here and measure it (root; the checkout's "
        "hubbench/, python -m hubbench --help; docs/teaching.md)",
        add_help=False,
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["classroom-bench"]:
        return exit_code("dtfkit", "every task was stopped", lambda: _classroom_bench(args[1:]))
    parser = build_parser()
    ns = parser.parse_args(argv)
    if ns.command == "translations" and ns.action not in ("todo", "fill") and (ns.chapter or ns.file):
        parser.error(f"translations {ns.action} works on every chapter and document; it takes no name")
    if ns.command == "translations" and ns.all and ns.action != "todo":
        parser.error("--all goes with translations todo")
    if ns.command == "translations" and ns.action in ("todo", "fill") and not ns.chapter:
        parser.error(f"translations {ns.action} needs a chapter (its number, e.g. 09)")
    if ns.command == "translations" and ns.action == "fill" and not ns.file:
        parser.error("translations fill needs the JSON file of translations")
    if ns.command == "compat" and (ns.steps < 2 or ns.timeout <= 0):
        parser.error("compat needs --steps of at least 2 and a positive --timeout")
    if ns.command == "student-copies" and ns.format != "nbgrader":
        for flag in ("exercises_only", "lock_other_cells"):
            if getattr(ns, flag):
                parser.error(f"--{flag.replace('_', '-')} needs --format nbgrader")
    return exit_code("dtfkit", "every task was stopped", lambda: ns.func(ns))
