"""canna's own ops, one registry entry each (kernels/_registry.py; docs/DESIGN.md §11), grouped by
family. Importing this package registers them."""
from . import attention, elementwise, nn  # noqa: F401
