import sys

from specmon.tui.cli import main

sys.exit(main())
