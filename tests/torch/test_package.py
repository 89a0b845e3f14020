"""The installed `oclvm` package: its version, its metadata, and an extension module that finds
torch's libraries relative to itself, so the wheel installs into any environment with the same torch.

`make test` installs the package with a plain `pip install .` (build isolation on) before pytest
runs, so these tests see what a user's install gives. Run from the build tree only (nothing
installed), the tests that need an installation skip and say why.
"""
import importlib.metadata
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import torch

import oclvm

_REPO = pathlib.Path(__file__).resolve().parents[2]


def _project_version() -> str:
    text = (_REPO / "CMakeLists.txt").read_text()
    match = re.search(r"project\(oclvm VERSION ([0-9.]+)", text)
    assert match, "CMakeLists.txt names no project(oclvm VERSION ...)"
    return match.group(1)


def _installed() -> importlib.metadata.Distribution:
    try:
        dist = importlib.metadata.distribution("oclvm")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("oclvm is not installed (running from the build tree)")
    module = pathlib.Path(oclvm._C.__file__).resolve()
    if not any(pathlib.Path(dist.locate_file(f)).resolve() == module for f in dist.files or []):
        pytest.skip("the oclvm imported is not the installed one (running from the build tree)")
    return dist


def _dynamic_paths(library: pathlib.Path) -> list:
    """The RUNPATH / RPATH entries of an ELF file, as `readelf -d` prints them."""
    out = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True,
                         check=True).stdout
    paths = []
    for line in out.splitlines():
        match = re.search(r"\((?:RUNPATH|RPATH)\)\s+Library (?:runpath|rpath): \[(.*)\]", line)
        if match:
            paths.extend(match.group(1).split(":"))
    return paths


def test_version_is_the_projects():
    assert oclvm.__version__ == _project_version()
    assert "__version__" in oclvm.__all__


def test_installed_metadata():
    dist = _installed()
    assert dist.version == oclvm.__version__
    meta = dist.metadata
    assert meta["License"] == "BSD-3-Clause"
    assert any(req.startswith("torch") for req in dist.requires or [])
    names = {pathlib.PurePath(f).name for f in dist.files or []}
    assert "py.typed" in names, "the package says it is typed (PEP 561)"
    assert "LICENSE" in names, "the wheel carries the license text"
    assert "_version.py" in names


def test_installed_module_finds_torch_beside_itself(tmp_path):
    """No absolute path into the build's environment: the module's only search path is
    $ORIGIN/../torch/lib. A copy laid out as another environment (oclvm/ beside torch/) resolves
    every library torch provides: `ldd` reports nothing missing."""
    _installed()
    module = pathlib.Path(oclvm._C.__file__).resolve()
    paths = _dynamic_paths(module)
    assert paths == ["$ORIGIN/../torch/lib"], paths

    site = tmp_path / "site-packages"
    (site / "oclvm").mkdir(parents=True)
    copy = site / "oclvm" / module.name
    shutil.copy2(module, copy)
    (site / "torch").mkdir()
    (site / "torch" / "lib").symlink_to(pathlib.Path(torch.__file__).resolve().parent / "lib")
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    out = subprocess.run(["ldd", str(copy)], capture_output=True, text=True, env=env, check=True)
    assert "not found" not in out.stdout, out.stdout
    beside = str(site / "oclvm" / ".." / "torch" / "lib")  # ldd prints $ORIGIN unnormalised
    for library in ("libc10.so", "libtorch_cpu.so"):
        assert f"{library} => {beside}/{library}" in out.stdout, out.stdout


def _tls_bytes(library: pathlib.Path) -> int:
    """The size in memory of an ELF file's thread-local segment (PT_TLS), as `readelf -l` prints
    it; 0 when it has none."""
    out = subprocess.run(["readelf", "-lW", str(library)], capture_output=True, text=True,
                         check=True).stdout
    for line in out.splitlines():
        fields = line.split()
        if fields and fields[0] == "TLS":
            return int(fields[5], 16)  # Type Offset VirtAddr PhysAddr FileSiz MemSiz Flg Align
    return 0


def test_module_static_tls_stays_small():
    """The hot thread-locals use the initial-exec model, so the module's whole thread-local block
    comes out of glibc's static TLS surplus when Python loads it: it must stay small (168 bytes
    when written; torch's own libgomp takes 120), or another library loaded later could find no
    room. A thread-local array or cache added to the module shows up here."""
    module = pathlib.Path(oclvm._C.__file__).resolve()
    dynamic = subprocess.run(["readelf", "-dW", str(module)], capture_output=True, text=True,
                             check=True).stdout
    assert "STATIC_TLS" in dynamic, "no initial-exec thread-local left: the test has lost its point"
    assert 0 < _tls_bytes(module) <= 256


def test_module_loads_without_the_optional_static_tls_surplus():
    """With glibc's optional surplus for dlopen'ed initial-exec thread-locals set to 0 (512 bytes
    by default), the module still loads after torch and runs an operator: it leaves that surplus
    whole for other libraries."""
    env = dict(os.environ, GLIBC_TUNABLES="glibc.rtld.optional_static_tls=0")
    script = ("import torch, oclvm\n"
              "x = torch.ones(4, device='opencl')\n"
              "print((x + 1).sum().item())\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "8.0"
