"""``python -m devkit.serving.fuzz``: see :func:`~.run.main`."""

import sys

from devkit.serving.fuzz.run import main

if __name__ == "__main__":
    sys.exit(main())
