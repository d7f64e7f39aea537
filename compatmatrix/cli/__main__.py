"""python -m compatmatrix.cli: the same as python -m compatmatrix."""

import sys

from . import main

sys.exit(main())
