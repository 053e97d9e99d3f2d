"""``python -m transformer_lib.assignments build`` (see the package docstring)."""
import sys

from . import main

sys.exit(main())
