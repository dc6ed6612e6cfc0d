# canna's two set-up commands (README): `make demo` runs the main job, `make test` runs the tests.
# Both create and reuse a virtual environment in .venv with every extra installed; torch is pinned
# to 2.13.0 by constraints.txt.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# PyTorch's index of CPU-only wheels: on Linux the plain `torch` wheel of PyPI is the CUDA build
# (several GB of CUDA libraries canna does not use), so torch is installed first from this index.
# It is used only when it answers (a machine without access to it, or whose pip configuration
# already provides the CPU wheel, goes on with pip's own indexes); `make TORCH_INDEX=` skips it.
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
# sources of the C libraries built at install: a change rebuilds them
NATIVE := setup.py $(wildcard acl_rt/_cdef/*.h acl_rt/_sim/*.c acl_rt/_sim/*.h acl_rt/_sim_hccl/*.c acl_rt/_native/*.c acl_rt/_native/*.h kernels/_sim/*.c kernels/_sim/*.h kernels/include/*.h canna_dl/_native/*.c canna_dl/_native/*.h kernels/_native/*.c kernels/_native/*.h)

.PHONY: demo test clean

$(VENV)/.deps: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet "setuptools>=69" wheel "cffi>=1.16"
	@if [ -n "$(TORCH_INDEX)" ] && $(PY) -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1].rstrip("/") + "/torch/", timeout=20)' "$(TORCH_INDEX)" 2>/dev/null; then \
		echo "torch: the CPU build, from $(TORCH_INDEX)"; \
		$(PIP) install --quiet -c constraints.txt --no-deps --extra-index-url "$(TORCH_INDEX)" torch; \
	else \
		echo "torch: from pip's configured indexes ($(if $(TORCH_INDEX),$(TORCH_INDEX) does not answer,TORCH_INDEX is empty))"; \
	fi
	$(PIP) install --quiet -c constraints.txt -e '.[all]'
	touch $@

$(VENV)/.built: $(VENV)/.deps $(NATIVE)
	$(PIP) install --quiet --no-deps --no-build-isolation -e .
	touch $@

demo: $(VENV)/.built
	$(PY) tools/demo.py

test: $(VENV)/.built
	$(PY) -m pytest

clean:
	rm -rf $(VENV) build *.egg-info acl_rt/_acl_ffi.py acl_rt/_sim/*.so acl_rt/_sim_hccl/*.so kernels/_sim/*.so canna_dl/_native*.so kernels/_native*.so
