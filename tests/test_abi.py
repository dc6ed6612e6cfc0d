"""canna's declarations of the AscendCL ABI (acl_rt/_cdef/) against CANN's real public headers.

CANN's headers come from the torch-npu wheel on PyPI (downloaded once into ~/.cache/canna/abi, see
tools/abi_check.py), or from a CANN install named by CANNA_CANN_INCLUDE. Offline, every test that
needs them skips. The checks themselves are in tools/abi_check.py (`python tools/abi_check.py`
prints the full report).
"""
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("canna_abi_check", REPO / "tools" / "abi_check.py")
abi_check = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = abi_check
_spec.loader.exec_module(abi_check)

KINDS = ("function", "constant", "typedef", "enum", "struct")


@pytest.fixture(scope="session")
def compilers():
    missing = [c for c in ("gcc", "g++") if not shutil.which(c)]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not found: the ABI check needs the C/C++ compiler")


@pytest.fixture(scope="session")
def cann_include():
    try:
        return abi_check.get_cann_include(log=lambda msg: print(msg, file=sys.stderr))
    except abi_check.HeadersUnavailable as exc:
        if os.environ.get("CANNA_CANN_INCLUDE"):
            pytest.fail(f"CANNA_CANN_INCLUDE is set but unusable: {exc}")
        pytest.skip(f"CANN headers unavailable, ABI not checked: {exc}")


@pytest.fixture(scope="session")
def report(cann_include, compilers):
    return abi_check.run(cann_include)


def _lines(results):
    return "\n".join(r.line() for r in results)


# --- discovery of the cdef files (no headers or compiler needed) ---------------------------------


def test_cdef_files_discovered():
    files, skipped = abi_check.discover_cdef_files()
    names = [f.name for f in files]
    assert names[0] == "rt_types.h"   # types first, the runtime's before other areas'
    assert [n for n in names if n.startswith("rt_")] == ["rt_types.h", "rt_errors.h", "rt_funcs.h"]
    assert not [n for n in names if n.startswith("sim_")]
    assert "sim_funcs.h" in skipped
    for f in files:
        assert f.headers, f"{f.name}: no CANN headers to check it against"


def test_discovery_rules(tmp_path):
    for name in ("nn_funcs.h", "rt_funcs.h", "nn_types.h", "rt_types.h", "rt_errors.h",
                 "sim_funcs.h", "sim_types.h", "kl_funcs.h", "notes.h", "x.txt"):
        (tmp_path / name).write_text("")
    (tmp_path / "zz_types.h").write_text("/* @cann-headers: acl/acl.h foo/bar.h */\n")
    files, skipped = abi_check.discover_cdef_files(tmp_path)
    assert [f.name for f in files] == ["rt_types.h", "nn_types.h", "zz_types.h", "rt_errors.h",
                                       "rt_funcs.h", "kl_funcs.h", "nn_funcs.h"]
    assert skipped == ["notes.h", "sim_funcs.h", "sim_types.h"]
    headers = {f.name: f.headers for f in files}
    assert headers["zz_types.h"] == ("acl/acl.h", "foo/bar.h")
    assert "aclnn/acl_meta.h" in headers["nn_funcs.h"]
    assert headers["rt_funcs.h"] == abi_check.ACL_HEADERS


def test_every_declaration_is_attributed():
    files, _ = abi_check.discover_cdef_files()
    _, decls = abi_check.load_declarations(files)
    by_file = {}
    for d in decls:
        by_file.setdefault(d.file, []).append(d)
    text = (REPO / "acl_rt" / "_cdef" / "rt_errors.h").read_text()
    errors = set(re.findall(r"(?m)^#define\s+(ACL_ERROR_\w+)", text))
    assert len(errors) > 200
    assert {d.name for d in by_file["rt_errors.h"]} == errors
    protos = set(re.findall(r"(?m)^\w[\w\s*]*?\b(acl\w+)\(", (REPO / "acl_rt" / "_cdef" / "rt_funcs.h").read_text()))
    assert {d.name for d in by_file["rt_funcs.h"] if d.kind == "function"} == protos
    assert not [d for d in decls if d.data.get("unsupported")]


# --- the check against CANN's headers ------------------------------------------------------------


def test_cann_headers_compile(report):
    assert not report.global_errors, "\n".join(report.global_errors)


@pytest.mark.parametrize("kind", KINDS)
def test_declarations_match_cann(report, kind):
    results = [r for r in report.results if r.decl.kind == kind]
    if kind in ("function", "constant", "struct"):
        assert results, f"no {kind} declarations found in the cdef files"
    problems = [r for r in results if r.status in abi_check.PROBLEMS]
    assert not problems, (f"{len(problems)} {kind} declaration(s) differ from CANN's headers "
                          f"({report.include}):\n{_lines(problems)}")


def test_every_error_code_checked(report):
    text = (REPO / "acl_rt" / "_cdef" / "rt_errors.h").read_text()
    codes = re.findall(r"(?m)^#define\s+(ACL_ERROR_\w+)\s+(\d+)", text)
    for name, value in codes:
        r = report.by_name(name)
        assert r.status == abi_check.OK, r.line()
        assert r.decl.data["value"] == int(value)


def test_hccl_declarations_checked(report):
    """HCCL (acl_rt/_cdef/hccl_*.h) against the wheel's third_party/hccl/inc/hccl/hccl.h and
    hccl_types.h: every declaration is checked (the wheel always ships them) and matches."""
    results = [r for r in report.results if r.decl.file.startswith("hccl_")]
    names = {r.decl.name for r in results}
    for name in ("HcclAllReduce", "HcclCommInitRootInfo", "HcclGroupEnd", "HcclRootInfo", "HCCL_E_TIMEOUT",
                 "HCCL_ROOT_INFO_BYTES", "HCCL_DATA_TYPE_BFP16", "HCCL_REDUCE_MIN"):
        assert name in names
    bad = [r for r in results if r.status != abi_check.OK]
    assert not bad, _lines(bad)


def test_no_unchecked_declarations(report):
    if report.unchecked:
        # one line per cdef file (its missing headers named once): nn_funcs.h alone has ~100
        by_file: dict[str, list] = {}
        for r in report.unchecked:
            by_file.setdefault(r.decl.file, []).append(r.decl.name)
        lines = []
        for name, decls in by_file.items():
            cf = next((f for f in abi_check.discover_cdef_files()[0] if f.name == name), None)
            missing = [h for h in (cf.headers if cf else ()) if not (Path(report.include) / h).is_file()]
            lines.append(f"{name}: {len(decls)} ({', '.join(decls[:4])}{', ...' if len(decls) > 4 else ''}) "
                         f"need {', '.join(missing[:3])}{f' and {len(missing) - 3} more' if len(missing) > 3 else ''}")
        pytest.skip(f"{len(report.unchecked)} declaration(s) not checked, their CANN header is not "
                    f"in {report.include}:\n" + "\n".join(lines))


@pytest.mark.parametrize("folder", ["acl_rt/_sim", "kernels/_sim"])
def test_simulator_sources_compile_against_cann_headers(cann_include, compilers, folder):
    sources = sorted((REPO / folder).glob("*.c"))
    if not sources:
        pytest.skip(f"{folder} has no C sources yet")
    results = abi_check.compile_c_sources(sources, cann_include)
    failed = [r for r in results if not r.ok and not r.missing_header]
    assert not failed, "\n\n".join(f"{r.source.relative_to(REPO)}:\n{r.output}" for r in failed)
    unavailable = [r for r in results if r.missing_header]
    if unavailable:
        pytest.skip("not compiled, CANN header not available: " + ", ".join(
            f"{r.source.relative_to(REPO)} needs {r.missing_header}" for r in unavailable))


def test_cli_reports_ok(cann_include, compilers):
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "abi_check.py"),
                           "--headers", str(cann_include), "--no-sim"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ABI check: OK" in proc.stdout


# --- the checker itself catches mismatches -------------------------------------------------------

# Self-contained cdef files with known differences from CANN (facts of the AscendCL ABI: aclrtStream
# is void*, ACL_MEMCPY_DEVICE_TO_HOST is 2, ACL_EVENT_TIME_LINE is 8, aclrtMemLocation is 8 bytes,
# ACL_ERROR_RT_PARAM_INVALID is 107000, aclrtMemcpy's kind is aclrtMemcpyKind, aclrtFree returns
# aclError), next to correct declarations that must stay OK.
BAD_CDEF = {
    "rt_types.h": """
typedef int aclError;
typedef int *aclrtStream;
typedef void *aclrtEvent;
#define ACL_EVENT_SYNC 1
#define ACL_EVENT_TIME_LINE 4
#define ACL_CANNA_NOT_IN_CANN 7
typedef enum aclrtMemcpyKind {
    ACL_MEMCPY_HOST_TO_HOST = 0,
    ACL_MEMCPY_HOST_TO_DEVICE = 1,
    ACL_MEMCPY_DEVICE_TO_HOST = 5
} aclrtMemcpyKind;
typedef enum aclrtMemLocationType {
    ACL_MEM_LOCATION_TYPE_HOST = 0,
    ACL_MEM_LOCATION_TYPE_DEVICE = 1
} aclrtMemLocationType;
typedef struct aclrtMemLocation {
    uint32_t id;
    aclrtMemLocationType type;
    uint32_t extra;
} aclrtMemLocation;
typedef struct aclrtPtrAttributes {
    aclrtMemLocation location;
    uint32_t pageSize;
    uint32_t rsv[4];
} aclrtPtrAttributes;
""",
    "rt_errors.h": """
#define ACL_ERROR_INVALID_PARAM 100000
#define ACL_ERROR_RT_PARAM_INVALID 107001
""",
    "rt_funcs.h": """
aclError aclInit(const char *configPath);
aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count, int kind);
int64_t aclrtFree(void *devPtr);
aclError aclrtCannaNotInCann(void);
aclError aclrtRecordEvent(aclrtEvent event, aclrtStream stream);
""",
    "nn_funcs.h": """
typedef struct aclTensor aclTensor;
aclTensor *aclnnCannaSanityOnly(const int64_t *dims, uint64_t dimsNum);
""",
}

EXPECTED = {
    # name: (status, substrings of the message)
    "aclInit": ("OK", []),
    "ACL_EVENT_SYNC": ("OK", []),
    "ACL_MEMCPY_HOST_TO_DEVICE": ("OK", []),
    "ACL_ERROR_INVALID_PARAM": ("OK", []),
    "aclrtEvent": ("OK", []),
    "aclrtMemLocationType": ("OK", []),
    "aclrtRecordEvent": ("OK", []),  # our aclrtStream typedef is wrong, but the prototype uses CANN's
    "aclrtStream": ("MISMATCH", ["ours `int *`", "void"]),
    "ACL_EVENT_TIME_LINE": ("MISMATCH", ["ours 4, CANN's 8"]),
    "ACL_CANNA_NOT_IN_CANN": ("MISSING", ["not declared in CANN"]),
    "ACL_MEMCPY_DEVICE_TO_HOST": ("MISMATCH", ["ours 5, CANN's 2"]),
    "ACL_ERROR_RT_PARAM_INVALID": ("MISMATCH", ["ours 107001, CANN's 107000"]),
    "aclrtMemLocation": ("MISMATCH", ["sizeof ours 12, CANN's 8", "no field 'extra'"]),
    # aclrtMemLocation's size propagates: the outer struct's size and field offsets differ too
    "aclrtPtrAttributes": ("MISMATCH", ["sizeof ours 32, CANN's 28", "offsetof .pageSize ours 12, CANN's 8"]),
    "aclrtMemcpy": ("MISMATCH", ["ours `aclError aclrtMemcpy(void*, size_t, const void*, size_t, int)`",
                                 "CANN's `aclError aclrtMemcpy(void*, size_t, const void*, size_t, aclrtMemcpyKind)`",
                                 "acl/acl_rt.h:"]),
    "aclrtFree": ("MISMATCH", ["ours `int64_t aclrtFree(void*)`", "CANN's `aclError aclrtFree(void*)`"]),
    "aclrtCannaNotInCann": ("MISSING", ["not declared in CANN"]),
}


def test_checker_catches_mismatches(cann_include, compilers):
    files = abi_check.cdef_from_texts(BAD_CDEF)
    report = abi_check.check(files, cann_include)
    text = report.format()
    assert not report.global_errors, text
    assert not report.ok
    for name, (status, needles) in EXPECTED.items():
        r = report.by_name(name)
        assert r.status == status, f"{name}: expected {status}\n{text}"
        line = r.line()
        for needle in needles:
            assert needle in line, f"{needle!r} not in {line!r}"
        if status != "OK":
            assert line in text
    # a declaration whose CANN header is not available is reported as such, not as missing
    r = report.by_name("aclnnCannaSanityOnly")
    if (Path(cann_include) / "aclnn" / "acl_meta.h").is_file():
        assert r.status == "MISSING", r.line()
    else:
        assert r.status == "UNCHECKED" and "needs aclnn/acl_meta.h" in r.line(), r.line()
        assert "unchecked (their CANN header is not in the include dir)" in text


def test_cli_exit_code_on_mismatch(cann_include, compilers, tmp_path):
    for name, text in BAD_CDEF.items():
        (tmp_path / name).write_text(text)
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "abi_check.py"),
                           "--headers", str(cann_include), "--cdef-dir", str(tmp_path), "--no-sim"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "aclrtMemcpy [rt_funcs.h:3] MISMATCH" in proc.stdout
    assert "ABI check: FAILED" in proc.stdout


def test_c_compile_catches_a_conflicting_prototype(cann_include, compilers, tmp_path):
    good = tmp_path / "good.c"
    good.write_text('#include "acl/acl.h"\n'
                    "aclError aclrtFree(void *devPtr);\n")
    bad = tmp_path / "bad.c"
    bad.write_text('#include "acl/acl.h"\n'
                   "aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count, int kind);\n")
    missing = tmp_path / "needs_aclnn.c"
    missing.write_text('#include "aclnn/canna_no_such_header.h"\n')
    res = {r.source.name: r for r in abi_check.compile_c_sources([good, bad, missing], cann_include)}
    assert res["good.c"].ok, res["good.c"].output
    assert not res["bad.c"].ok and "aclrtMemcpy" in res["bad.c"].output
    assert res["bad.c"].missing_header is None
    assert not res["needs_aclnn.c"].ok
    assert res["needs_aclnn.c"].missing_header == "aclnn/canna_no_such_header.h"


# --- downloading the headers leaves the calling process intact -----------------------------------


def test_download_path_keeps_setuptools_importable(tmp_path, py):
    """Obtaining the headers with an empty cache must not import pip into the calling process: on
    Python < 3.12 `import pip` switches off setuptools' distutils shim, and a later
    `import setuptools` (torch.compile's inductor does one) fails. The download itself is stubbed
    (no network): the code path up to and around the `pip download` subprocess runs for real."""
    proc = py(f"""
        import importlib.util, subprocess, sys
        spec = importlib.util.spec_from_file_location("abi_check", {str(REPO / "tools" / "abi_check.py")!r})
        abi_check = importlib.util.module_from_spec(spec)
        sys.modules["abi_check"] = abi_check; spec.loader.exec_module(abi_check)
        calls, real_run = [], subprocess.run
        def fake_run(cmd, **kw):
            if "download" not in cmd:
                return real_run(cmd, **kw)
            calls.append(cmd)
            return subprocess.CompletedProcess(cmd, 1, "", "ERROR: stubbed download")
        abi_check.subprocess.run = fake_run
        try:
            abi_check.get_cann_include(cache_dir={str(tmp_path)!r})
        except abi_check.HeadersUnavailable as exc:
            assert "stubbed download" in str(exc), exc
        assert calls and calls[0][:4] == [sys.executable, "-m", "pip", "download"], calls
        assert "pip" not in sys.modules, "pip was imported into the calling process"
        import setuptools, distutils.core
        assert "_distutils" in distutils.core.__file__, distutils.core.__file__
        print("ok")
    """, env={"CANNA_CANN_INCLUDE": None})
    assert proc.stdout.strip() == "ok"


def test_ci_checks_the_folder_abi_check_extracts_to(tmp_path):
    """.ci/run fails unless the first test run extracted CANN's headers into the empty cache; the
    glob it checks must match the path get_cann_include() extracts to (a rename of the cache folder
    once made every CI run fail after a green suite)."""
    import fnmatch
    text = (REPO / ".ci" / "run").read_text()
    m = re.search(r'compgen -G "\$CANNA_ABI_CACHE/([^"]+)"', text)
    assert m, ".ci/run no longer checks the ABI cache with compgen -G"
    extracted = (f"torch-npu-{abi_check.WHEEL_VERSION}/{abi_check.CACHE_INCLUDE_NAME}"
                 "/acl/acl.h")
    assert fnmatch.fnmatch(extracted, m.group(1)), (m.group(1), extracted)
    # and the pattern is not so loose that any file would do
    assert not fnmatch.fnmatch(f"torch-npu-{abi_check.WHEEL_VERSION}/wheels/x.whl", m.group(1))
