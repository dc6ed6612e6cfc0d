"""canna's own ops, one registry entry each (kernels/_registry.py; docs/DESIGN.md §11), grouped by
family. Importing this package registers them."""
from . import attention, elementwise, nn, optim  # noqa: F401
from . import adaptive_pool, batchnorm, concat_pad, indexing  # noqa: F401  (issue 14: model ops)
from . import activation, dropout, linalg, loss  # noqa: F401  (issue 14: pointwise, dropout, addmm, losses)
from . import convert, logical, rnn, scan  # noqa: F401  (issue 14: clone, cast, all, any, comparisons, lstm, cumsum)
