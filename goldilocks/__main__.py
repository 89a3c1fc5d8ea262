"""``python -m goldilocks …``: the ``goldilocks`` command line (``goldilocks.cli``)."""

import sys

from goldilocks.cli import main

if __name__ == "__main__":
    sys.exit(main())
