"""``python -m fastrag.cli``: the ``fastrag`` command line."""

import sys

from fastrag.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
