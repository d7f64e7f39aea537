"""Real inputs: pip requirements files (with their index lines), `pip freeze` output and PEP 751 pylock.toml,
read into one typed `InputSet`. Pure: the only side effect is reading the files named (a `reader` can be given)."""

from .model import IndexLine, InputError, InputRequirement, InputSet
from .read import read_inputs

__all__ = ["IndexLine", "InputError", "InputRequirement", "InputSet", "read_inputs"]
