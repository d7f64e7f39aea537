"""``compat export``: a resolved set as the files other tools read, and ``--validate`` for hand-written ones.

``k8s.py`` a Kubeflow PyTorchJob / TrainJob as data; ``dockerfile.py`` what a Dockerfile for the set holds;
``pylock.py`` the set as PEP 751 lock data; ``validate.py`` findings for a manifest or Dockerfile; ``service.py`` the
decisions that need the set (ccl settings, the training command translated, the plan's hosts) and --validate's
reading. The text of each format is render/'s (manifest.py, dockerfile.py, pylock.py, requirements.py).
"""
