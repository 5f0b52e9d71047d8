"""``python -m vllm_frozen_kv_mtp.serving.fuzz``: see :func:`~.run.main`."""

import sys

from vllm_frozen_kv_mtp.serving.fuzz.run import main

if __name__ == "__main__":
    sys.exit(main())
