"""What ``dtfkit.diagnose`` returns: one ``Finding`` per mistake, gathered in a ``Diagnosis``."""

from __future__ import annotations

from dataclasses import dataclass

from dtfkit.htmltable import html_table
from dtfkit.i18n import N_, _

NOTHING_FOUND = N_("no known mistake found")


@dataclass(frozen=True)
class Finding:
    """One known mistake: a stable ``code``, the ``task`` it concerns ("" for the whole
    cluster), a one-sentence ``message`` saying what is wrong, the ``fix``, and where to read
    more (``see``: a public TensorFlow issue or source file), if anywhere.

    Example::

        Finding("duplicate-task", "worker:0", "Two processes claim worker:0.", "Give each its own index.")
    """

    code: str
    task: str
    message: str
    fix: str
    see: str = ""

    def __str__(self) -> str:
        where = self.task or _("cluster")
        see = _(" (see {see})").format(see=self.see) if self.see else ""
        return _("{where} — {message}{see} Fix: {fix}").format(
            where=where, message=self.message, see=see, fix=self.fix
        )


@dataclass(frozen=True)
class Diagnosis:
    """Every known mistake found, in the order the rules found them; ``bool(d)`` is True when
    there is at least one.

    Example::

        d = dtfkit.diagnose([tf_config_0, tf_config_1])
        if d:
            print(d)          # one line per finding
        "duplicate-task" in d.codes
    """

    findings: tuple[Finding, ...] = ()

    @property
    def codes(self) -> set[str]:
        """The codes of the findings (``{"duplicate-task", ...}``)."""
        return {f.code for f in self.findings}

    def __bool__(self) -> bool:
        return bool(self.findings)

    def __len__(self) -> int:
        return len(self.findings)

    def __str__(self) -> str:
        if not self.findings:
            return _(NOTHING_FOUND)
        return "\n".join(str(f) for f in self.findings)

    def _repr_html_(self) -> str:
        if not self.findings:
            return f"<p>{_(NOTHING_FOUND)}</p>"
        rows = [(f.task or _("cluster"), f.code, f.message, f.fix, f.see) for f in self.findings]
        return html_table(
            [_("task"), _("code"), _("what is wrong"), _("fix"), _("see")],
            rows,
            caption=_("{count} known mistakes found").format(count=len(rows))
            if len(rows) != 1
            else _("1 known mistake found"),
            css_class="dtfkit-diagnosis",
        )
