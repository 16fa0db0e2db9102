"""Build: a spec's many variants compiled in parallel, then packed into one archive (``karchive build``).

The spec file (:mod:`.spec_file`), the build itself and the choice of executor (:mod:`.pipeline`), where
compiles run (:mod:`.executors`: local worker processes; :mod:`.executors_ray`: a Ray cluster), reusing an
earlier archive's variants (:mod:`.reuse`), rebuilding an archive from its own sources (:mod:`.rebuild`) and
assembling the archive (:mod:`.pack`, also used by capture).

Builds on :mod:`karchive.producer.compile` only (tests/test_layers.py). Importing it does not import Triton
or Ray.
"""

from ..compile.aot import VariantRequest
from .executors import Executor, LocalExecutor, TaskOutcome
from .pack import ArchiveBuilder
from .pipeline import BuildResult, build_archive, compile_all, executor_kind, make_executor
from .rebuild import RebuildReport, rebuild_archive
from .reuse import ReusePlan, plan_reuse
from .spec_file import BuildSpec, load_spec, parse_spec, validate_requests

__all__ = [
    "ArchiveBuilder",
    "BuildResult",
    "BuildSpec",
    "Executor",
    "LocalExecutor",
    "RebuildReport",
    "ReusePlan",
    "TaskOutcome",
    "VariantRequest",
    "build_archive",
    "compile_all",
    "executor_kind",
    "load_spec",
    "make_executor",
    "parse_spec",
    "plan_reuse",
    "rebuild_archive",
    "validate_requests",
]
