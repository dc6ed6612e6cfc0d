"""cffi build script (``cffi_modules`` in setup.py): generates the out-of-line ABI-mode module
``acl_rt._acl_ffi`` so importing acl_rt does not parse the declarations at run time."""
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("_canna_cdef", Path(__file__).with_name("__init__.py"))
_cdef = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_cdef)

ffibuilder = _cdef.make_ffi()
ffibuilder.set_source("acl_rt._acl_ffi", None)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
