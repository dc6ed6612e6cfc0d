"""Build steps that pyproject.toml cannot express: the simulator's C shared libraries and the
out-of-line cffi module. Everything else (metadata, dependencies, extras) is in pyproject.toml."""
import glob
import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class SharedLibrary(Extension):
    """A plain C shared library (no Python entry point) placed at ``<package path>.so``.

    The simulator libraries are loaded with ``ffi.dlopen`` exactly like CANN's own, so they must
    not carry Python's extension-module suffix or depend on libpython."""


class BuildExt(build_ext):
    def get_ext_filename(self, fullname):
        ext = self.ext_map.get(fullname)
        if isinstance(ext, SharedLibrary):
            return os.path.join(*fullname.split(".")) + ".so"
        return super().get_ext_filename(fullname)

    def get_export_symbols(self, ext):
        if isinstance(ext, SharedLibrary):
            return []
        return super().get_export_symbols(ext)

    def get_libraries(self, ext):
        if isinstance(ext, SharedLibrary):
            return ext.libraries
        return super().get_libraries(ext)


def sim_library(name, folder, **kw):
    sources = sorted(glob.glob(os.path.join(folder, "*.c")))
    return SharedLibrary(
        name,
        sources=sources,
        depends=sorted(glob.glob(os.path.join(folder, "*.h")) + glob.glob("acl_rt/_cdef/*.h")),
        extra_compile_args=["-O2", "-g", "-std=gnu11", "-fvisibility=hidden", "-pthread", "-Wall", "-Wextra"]
        + kw.pop("cflags", []),
        extra_link_args=["-pthread"],
        libraries=["m"] + kw.pop("libraries", []),
        **kw,
    )


ext_modules = []
# the simulated AscendCL runtime (libascendcl_sim.so)
if glob.glob("acl_rt/_sim/*.c"):
    ext_modules.append(sim_library("acl_rt._sim.libascendcl_sim", "acl_rt/_sim"))
# the simulated HCCL (libhccl_sim.so: Hccl* collectives between simulated devices); like the op
# library it calls the runtime's functions (aclsimLaunchTask & co.), resolved from libascendcl_sim.so
if glob.glob("acl_rt/_sim_hccl/*.c"):
    ext_modules.append(sim_library("acl_rt._sim_hccl.libhccl_sim", "acl_rt/_sim_hccl", libraries=["rt"]))
# the simulated op library (aclCreateTensor & co. + aclnn*: libopapi_sim.so); it calls the runtime's
# functions, resolved at load time from libascendcl_sim.so (loaded first, RTLD_GLOBAL)
if glob.glob("kernels/_sim/*.c"):
    # -fno-math-errno: no kernel reads errno, and a libm call that may set it (sqrtf) keeps a loop
    # from being vectorized (the results are the same)
    ext_modules.append(sim_library("kernels._sim.libopapi_sim", "kernels/_sim",
                                   include_dirs=["kernels/include"], cflags=["-fno-math-errno"]))
# canna_dl's C helpers (DLPack capsules: deleters that take the GIL, capsule destructors):
# a CPython extension module built from canna_dl/_native/*.c when present
if glob.glob("canna_dl/_native/*.c"):
    ext_modules.append(Extension("canna_dl._native", sources=sorted(glob.glob("canna_dl/_native/*.c")),
                                 depends=sorted(glob.glob("canna_dl/_native/*.h")),
                                 extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra"]))

# the kernel library's hot path (cached aclnn calls launched in one C call): a CPython extension
# that calls the op library through function pointers taken from the loaded libraries
if glob.glob("kernels/_native/*.c"):
    ext_modules.append(Extension("kernels._native", sources=sorted(glob.glob("kernels/_native/*.c")),
                                 depends=sorted(glob.glob("kernels/_native/*.h")),
                                 extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra"]))

# the core of acl_rt's caching allocator (block bookkeeping, best fit, split/merge, statistics):
# a CPython extension that calls the runtime through function pointers taken from the loaded library
if glob.glob("acl_rt/_native/*.c"):
    ext_modules.append(Extension("acl_rt._native", sources=sorted(glob.glob("acl_rt/_native/*.c")),
                                 depends=sorted(glob.glob("acl_rt/_native/*.h")),
                                 extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra", "-pthread"]))

setup(
    ext_modules=ext_modules,
    cmdclass={"build_ext": BuildExt},
    cffi_modules=["acl_rt/_cdef/_build.py:ffibuilder"],
)
