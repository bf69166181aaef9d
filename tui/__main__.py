"""`python -m specmon.tui`: the `specmon` command."""

import sys

from specmon.tui.cli import main

sys.exit(main())
