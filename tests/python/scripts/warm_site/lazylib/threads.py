"""A lazy import that starts a Python thread when it is imported (a metrics
exporter, a prefetcher): a fork server that imported it could not fork safely."""
import threading
import time

from lazylib import mark

mark("threads")
threading.Thread(target=time.sleep, args=(3600,), name="lazylib-poller", daemon=True).start()
