"""The program's own module imported at its first step: never learned."""
from lazylib import mark

mark("own")
