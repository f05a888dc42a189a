"""Kubernetes name rules (as ``k8s.io/apimachinery/pkg/util/validation`` states them), with reasons.

Example::

    >>> dns1035_problems("My_Job")
    ['contains uppercase letters', "contains '_' (only lowercase letters, digits and '-' are allowed)"]
    >>> to_dns1035("My_Job.py")
    'my-job-py'
"""

from __future__ import annotations

import re
import string

from dtfkit.i18n import _

LABEL_MAX = 63
SUBDOMAIN_MAX = 253
CONFIGMAP_KEY_MAX = 253
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"^{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*$")
_CONFIGMAP_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")


def dns1035_problems(name: str, max_length: int = LABEL_MAX) -> list[str]:
    """Why ``name`` is not a DNS-1035 label (empty list: it is one).

    A DNS-1035 label has at most 63 characters: lowercase letters, digits and '-',
    starting with a letter and ending with a letter or digit.

    Example::

        >>> dns1035_problems("worker-1")
        []
    """
    if not name:
        return [_("is empty")]
    problems = []
    if any(c in string.ascii_uppercase for c in name):
        problems.append(_("contains uppercase letters"))
    allowed = string.ascii_letters + string.digits + "-"
    bad = sorted({c for c in name if c not in allowed})
    if bad:
        shown = ", ".join(repr(c) for c in bad)
        problems.append(
            _("contains {characters} (only lowercase letters, digits and '-' are allowed)").format(
                characters=shown
            )
        )
    if name[0] not in string.ascii_letters:
        problems.append(_("does not start with a letter"))
    elif name[-1] not in string.ascii_letters + string.digits:
        problems.append(_("does not end with a letter or digit"))
    if len(name) > max_length:
        problems.append(_too_long(name, max_length))
    if not problems and not _DNS1035.match(name):
        problems.append(_("is not a DNS-1035 label"))
    return problems


def to_dns1035(text: str, max_length: int = LABEL_MAX) -> str:
    """The nearest DNS-1035 label to ``text``: lowercased, other characters turned into '-'.

    Example::

        >>> to_dns1035("2nd_Run")
        'job-2nd-run'
    """
    name = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    if not name or name[0] not in string.ascii_lowercase:
        name = f"job-{name}".rstrip("-")
    return name[:max_length].rstrip("-")


def dns1123_subdomain_problems(name: str) -> list[str]:
    """Why ``name`` is not a DNS-1123 subdomain (the rule for ConfigMap names); empty if it is one.

    Example::

        >>> dns1123_subdomain_problems("job.files")
        []
    """
    if not name:
        return [_("is empty")]
    problems = []
    if len(name) > SUBDOMAIN_MAX:
        problems.append(_too_long(name, SUBDOMAIN_MAX))
    if not _DNS1123_SUBDOMAIN.match(name):
        problems.append(
            _("must be lowercase letters, digits, '-' and '.', starting and ending with a letter or digit")
        )
    return problems


def dns1123_label_problems(name: str) -> list[str]:
    """Why ``name`` is not a DNS-1123 label (the rule for namespace names); empty if it is one.

    Example::

        >>> dns1123_label_problems("1st-team")
        []
    """
    if not name:
        return [_("is empty")]
    if len(name) > LABEL_MAX:
        return [_too_long(name, LABEL_MAX)]
    if not re.match(rf"^{_DNS1123_LABEL}$", name):
        return [_("must be lowercase letters, digits and '-', starting and ending with a letter or digit")]
    return []


def configmap_key_problems(key: str) -> list[str]:
    """Why ``key`` cannot name a file in a ConfigMap's ``data``; empty if it can.

    Example::

        >>> configmap_key_problems("..x")
        ["must not be '.' or '..' or start with '..'"]
    """
    problems = []
    if not key or not _CONFIGMAP_KEY.match(key):
        problems.append(_("must be letters, digits, '-', '_' and '.' only"))
    if len(key) > CONFIGMAP_KEY_MAX:
        problems.append(_too_long(key, CONFIGMAP_KEY_MAX))
    if key in (".", "..") or key.startswith(".."):
        problems.append(_("must not be '.' or '..' or start with '..'"))
    return problems


def _too_long(name: str, limit: int) -> str:
    return _("is {length} characters long (at most {limit})").format(length=len(name), limit=limit)
