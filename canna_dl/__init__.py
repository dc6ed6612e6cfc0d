"""canna_dl — DLPack exchange, the DeviceArray type, framework adapters and autograd shims.

Not built yet: this package is a placeholder so the distribution's layout (docs/DESIGN.md §1) is in
place. It will depend on ``acl_rt`` only; frameworks stay optional.
"""
