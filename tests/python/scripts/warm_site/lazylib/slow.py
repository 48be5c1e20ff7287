"""A slow lazy import: 1 s at import (torch._dynamo's 4-5 s, in small), which
sets a variable of the environment when it is unset (torch._dynamo's import sets
TORCHINDUCTOR_CACHE_DIR so)."""
import os
import time

from lazylib import mark

mark("slow")
os.environ.setdefault("LAZYLIB_CACHE", "default")
time.sleep(1.0)
