# What dtfkit.kube hands out: type checkers and editors read it here; lazy_loader.attach_stub imports each
# name from its module on first use.

from .export import export_tfjob as export_tfjob, tfjob_documents as tfjob_documents
from .simulate import ReplicaRun as ReplicaRun, SimulationResult as SimulationResult, simulate as simulate
from .validate import (
    ManifestInvalid as ManifestInvalid,
    check_manifest as check_manifest,
    manifest_problems as manifest_problems,
)
