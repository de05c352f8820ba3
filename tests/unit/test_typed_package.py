"""pzq as installed (not from a clone) is typed for its users: the package a build
makes holds the PEP 561 marker, so ``mypy --strict`` checks a program's calls of
pzq.aio and pzq.client against their annotations instead of refusing the import
("module is installed, but missing library stubs or py.typed marker")."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_a_built_package_holds_py_typed_and_its_other_data(tmp_path):
    built = tmp_path / "lib"
    subprocess.run([sys.executable, "-c", "from setuptools import setup; setup()", "-q",
                    "build_py", "--build-lib", str(built)],
                   cwd=ROOT, check=True, capture_output=True, timeout=60)
    assert (built / "pzq" / "py.typed").is_file()
    assert (built / "pzq" / "monitoring" / "status.html").is_file()
