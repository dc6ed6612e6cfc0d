"""Every code block of README.md works as written: each ```python block runs in a fresh interpreter
from the repository's root, and the commands of each ```sh block exist (make targets, the
canna-smi options, the tools' scripts). Commands mentioned in the prose that run canna's tools name
the virtual environment's interpreter, as the README tells readers to."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

README = Path(ROOT) / "README.md"
TEXT = README.read_text()


def _blocks(lang: str) -> list[tuple[int, str]]:
    """(line number, code) of every fenced block of ``lang``."""
    out = []
    for m in re.finditer(rf"^```{lang}\n(.*?)^```", TEXT, re.S | re.M):
        out.append((TEXT.count("\n", 0, m.start()) + 1, m.group(1)))
    return out


PYTHON_BLOCKS = _blocks("python")
SH_BLOCKS = _blocks("sh")


def test_the_readme_has_its_blocks():
    assert len(PYTHON_BLOCKS) >= 8 and len(SH_BLOCKS) >= 2


@pytest.mark.timeout(900)
@pytest.mark.parametrize("line, code", PYTHON_BLOCKS, ids=[f"line{ln}" for ln, _ in PYTHON_BLOCKS])
def test_python_block_runs_as_written(line, code):
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=840,
                          env=dict(__import__("os").environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert proc.returncode == 0, (f"README.md line {line}: the block failed ({proc.returncode})\n"
                                  f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}")


def _commands(code: str):
    for raw in code.splitlines():
        cmd = raw.split("#", 1)[0].strip()
        if cmd:
            yield shlex.split(cmd)


def _check_command(argv: list[str]) -> None:
    from acl_rt import smi
    while argv and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", argv[0]):   # VAR=value prefixes
        argv = argv[1:]
    exe, args = argv[0], argv[1:]
    if exe == "make":
        makefile = (Path(ROOT) / "Makefile").read_text()
        for target in args:
            assert re.search(rf"^{re.escape(target)}:", makefile, re.M), f"no make target {target!r}"
    elif exe == ".venv/bin/canna-smi":
        pyproject = (Path(ROOT) / "pyproject.toml").read_text()
        assert 'canna-smi = "acl_rt.smi:main"' in pyproject
        if args[:1] == ["serve"]:
            smi._serve_parser().parse_args(args[1:])        # exits (SystemExit 2) on an unknown option
        else:
            smi._parser().parse_args(args)
    elif exe == ".venv/bin/python":
        assert args and (Path(ROOT) / args[0]).is_file(), f"no script {args[0]!r}"
    elif exe == ".venv/bin/torchrun":
        scripts = [a for a in args if a.endswith(".py")]
        assert scripts and all((Path(ROOT) / a).is_file() for a in scripts), f"no script in {args!r}"
    else:
        pytest.fail(f"README sh block: unexpected command {' '.join(argv)!r} (add a check for it here)")


@pytest.mark.parametrize("line, code", SH_BLOCKS, ids=[f"line{ln}" for ln, _ in SH_BLOCKS])
def test_sh_block_commands_exist(line, code):
    cmds = list(_commands(code))
    assert cmds, f"README.md line {line}: an empty sh block"
    for argv in cmds:
        _check_command(argv)


def test_prose_commands_use_the_environment_and_exist():
    """`python tools/x.py` and `canna-smi` in running text need the .venv (README, "Set up"); every
    script named exists."""
    bare = re.findall(r"`python tools/[\w.]+\.py[^`]*`", TEXT)
    assert not bare, f"commands without .venv/bin/: {bare}"
    for script in re.findall(r"`\.venv/bin/python (tools/[\w.]+\.py)", TEXT):
        assert (Path(ROOT) / script).is_file(), script
    assert not re.findall(r"`canna-smi [^`]*`", TEXT), "canna-smi commands in the prose must be .venv/bin/canna-smi"
    for cmd in re.findall(r"`(\.venv/bin/canna-smi[^`]*)`", TEXT):
        _check_command(shlex.split(cmd))


def test_readme_names_no_document_outside_the_repository():
    for word in ("SEEDS", "seed article", "shared/"):
        assert word not in TEXT, word


def test_no_block_applies_softmax_before_cross_entropy():
    """cross_entropy takes logits (it applies log-softmax itself): a model ending in a softmax fed
    to it trains on a doubly squashed output, a pattern a reader would copy."""
    for line, code in PYTHON_BLOCKS:
        if "cross_entropy(" in code:
            assert "nn.Softmax(" not in code, f"README.md line {line}"
