"""``python -m sentinel.cli``: the same as the ``sentinel`` script."""

import sys

from sentinel.cli.main import main

sys.exit(main())
