#!/usr/bin/env python3
"""fork_train.py's training behind a team helper package (fork_site/gpu_setup)
that initialises the GPU when it is imported."""
import gpu_setup  # noqa: F401  (picks and initialises the device at import)
from fork_train import main

if __name__ == "__main__":
    main()
