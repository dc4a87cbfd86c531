"""``python -m core.cli``: the same as the ``vtrain`` command."""

import sys

from core.cli import main

sys.exit(main())
