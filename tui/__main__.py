"""`python -m specmon.tui`: the `specmon` command."""

import sys

from specmon.tui import exits

exits.install()  # first, before the heavy imports: a Ctrl-C from here on ends with 130, never by the signal

try:
    from specmon.tui.cli import main

    code = main()
except KeyboardInterrupt:
    code = exits.EXIT_SIGINT
exits.settle()
sys.exit(code)
