"""`python -m specmon`: the `specmon` command."""

import sys

from specmon import exits

exits.install()  # first, before the heavy imports: a Ctrl-C from here on ends with 130, never by the signal

try:
    from specmon.cli import main

    code = main()
except KeyboardInterrupt:
    code = exits.EXIT_SIGINT
except Exception as exc:  # a signal wrapped by the import it landed in (see exits.interrupted_code)
    interrupted = exits.interrupted_code(exc)
    if interrupted is None:
        raise
    code = interrupted
exits.settle()
sys.exit(code)
