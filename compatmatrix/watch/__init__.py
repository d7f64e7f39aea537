"""compat launch --watch: a per-rank agent in the job (site/sitecustomize.py, put on its PYTHONPATH), the ring files it
writes (ring.py reads them), a pure judgement of what they say (judge.py: stall, death, straggler), the watcher that
runs beside the launch and ends the job on a finding (service.py), and its text and JSON (render.py,
schemas/watch-v1.json).

Imports nothing of compat above processes.py, scratch.py, console.py and errors.py: the launch itself comes in as a
callable from the command.
"""
