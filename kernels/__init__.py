"""kernels — canna's kernel library: array-level ops over aclnn and custom kernels.

Not built yet: this package is a placeholder so the distribution's layout (docs/DESIGN.md §1) is in
place. It will depend on ``acl_rt`` and ``canna_dl`` only.
"""
