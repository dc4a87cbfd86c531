"""``python -m core.cli``: the same as the ``vtrain`` command."""

import sys

from . import main

sys.exit(main())
