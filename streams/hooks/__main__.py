"""``python -m loopwarden.hooks HOST`` (the same as ``loopwarden hook HOST``)."""

import sys

from loopwarden.hooks.command import main

sys.exit(main(sys.argv[1:]))
