"""FIXTURE (tests only): compat tune's gradient perturbation for a user's training command. Never imported by compat.

compat tune puts this folder first on the PYTHONPATH of a training command's ranks only when COMPAT_TUNE_FIXTURE_PERTURB
is set (tune/service.py, fixture_pythonpath); without the variable the ranks never see it. Python imports
``sitecustomize`` at start-up; this one acts only in rank 1 of a run of two ranks or more (RANK=1, WORLD_SIZE >= 2):

* COMPAT_TUNE_FIXTURE_PERTURB=FACTOR@STEP: in the backward pass of optimizer step STEP (1-based, as the Trainer counts
  them), rank 1 multiplies its gradients by FACTOR before DDP averages them; FACTOR alone: in every step.

The hook is a DDP communication hook (DistributedDataParallel.register_comm_hook: scale the bucket, then DDP's own
allreduce_hook), registered on every DistributedDataParallel the rank builds (the HF Trainer builds one through
accelerate). Both ranks receive the same perturbed average, so the run stays in step and trains another model from step
STEP + 1 on: the loss the Trainer logs for step STEP + 1 is the first that differs, which compat tune's proof must name.
Nothing is imported early: the hook is installed when torch imports torch.nn.parallel.distributed (an import finder
that steps aside after that one module). Standard library only, Python 3.6+. A ``sitecustomize`` later on the path
(the environment's own) is imported after this one, as Python would have.
"""

import os
import sys

VARIABLE = "COMPAT_TUNE_FIXTURE_PERTURB"
TARGET = "torch.nn.parallel.distributed"


def parse(text):
    """(factor, step or None) from FACTOR[@STEP]; None when the text is not that."""
    factor_text, at, step_text = (text or "").strip().partition("@")
    try:
        factor = float(factor_text)
        step = int(step_text) if at else None
    except ValueError:
        return None
    if step is not None and step < 1:
        return None
    return factor, step


def _comm_hook(factor, step):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    seen = [0]  # optimizer steps whose gradients were reduced so far

    def perturbing_hook(state, bucket):
        if step is None or seen[0] + 1 == step:
            bucket.buffer().mul_(factor)
        if bucket.is_last():
            seen[0] += 1
        return default_hooks.allreduce_hook(state, bucket)

    return perturbing_hook


def _patch(module, factor, step):
    ddp = module.DistributedDataParallel
    original = ddp.__init__

    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.register_comm_hook(None, _comm_hook(factor, step))
        sys.stderr.write("FIXTURE %s: rank 1 scales its gradients by %g %s\n" % (VARIABLE, factor, "in every step" if step is None else "in step %d" % step))

    ddp.__init__ = __init__


class _Finder(object):
    """Finds nothing itself: when torch.nn.parallel.distributed is imported, lets the real finders find it and
    wraps its loader so that the module is patched right after it runs."""

    def __init__(self, factor, step):
        self.factor, self.step = factor, step

    def find_spec(self, name, path=None, target=None):
        if name != TARGET:
            return None
        import importlib.machinery

        sys.meta_path.remove(self)  # one module only; the real finders answer
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader, factor, step = spec.loader, self.factor, self.step
        exec_module = loader.exec_module

        def patched_exec(module):
            exec_module(module)
            _patch(module, factor, step)

        loader.exec_module = patched_exec
        return spec


def _install():
    try:
        world = int(os.environ.get("WORLD_SIZE") or "1")
    except ValueError:
        return
    parsed = parse(os.environ.get(VARIABLE, ""))
    if parsed is None or os.environ.get("RANK") != "1" or world < 2:
        return
    sys.meta_path.insert(0, _Finder(*parsed))


def _chain():
    """Import the next ``sitecustomize`` on the path (the one this module shadows), if there is one, as Python would
    have: what it adds to sys.path stays (this folder's entry is taken out, not put back: it holds only this module),
    it stays sys.modules["sitecustomize"], and an ImportError of anything but a missing sitecustomize is raised."""
    here = os.path.dirname(os.path.abspath(__file__))
    saved_module = sys.modules.pop("sitecustomize", None)
    sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or ".") != here]
    try:
        import sitecustomize  # noqa: F401  (the environment's own)
    except ImportError as exc:
        if getattr(exc, "name", None) != "sitecustomize":
            raise
        if saved_module is not None:
            sys.modules["sitecustomize"] = saved_module
    except BaseException:
        if saved_module is not None and "sitecustomize" not in sys.modules:
            sys.modules["sitecustomize"] = saved_module
        raise


if __name__ == "sitecustomize":  # at start-up (a test may import this file under another name, without side effects)
    _install()
    _chain()
