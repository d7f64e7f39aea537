"""compat migrate: from torch + IPEX + oneCCL bindings to stock PyTorch with gloo (IPEX is archived, torch-ccl
deprecated, and transformers >= 5.1 / accelerate >= 1.13 no longer accept ccl).

Pure core: plan.py (what goes, what comes, the resolver's reasons), command.py (the training command rewritten, through
translate's stock mode), source.py (IPEX calls in the scripts, read with ast), environment.py (what to unset, what compat
env prints for the stock set), document.py (the migrate-v1 JSON document, the before/after comparison), text.py (the
same for a terminal). Side effects: service.py (probe, install transaction, live doctor). Entry point: run_migrate.
"""

from __future__ import annotations

from .service import MigrateOptions, run_migrate

__all__ = ["MigrateOptions", "run_migrate"]
