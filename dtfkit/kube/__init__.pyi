# What dtfkit.kube hands out: type checkers and editors read it here; lazy_loader.attach_stub imports each
# name from its module on first use.

from .export import export_tfjob as export_tfjob
from .export import tfjob_documents as tfjob_documents
from .simulate import ReplicaRun as ReplicaRun
from .simulate import SimulationResult as SimulationResult
from .simulate import simulate as simulate
from .validate import (
    ManifestInvalid as ManifestInvalid,
)
from .validate import (
    check_manifest as check_manifest,
)
from .validate import (
    manifest_problems as manifest_problems,
)
