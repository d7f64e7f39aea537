"""Checks of an environment: each has a stable id and gives one Finding (pass / warn / fail / skip)."""
