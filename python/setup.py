"""Builds the qem package. Its extension, qem._qem, comes from the
project's own CMake build (the repository root's CMakeLists.txt with
-DQEM_PYTHON=ON, python/CMakeLists.txt), so the library's sources are
listed in one place only. Offline, in a venv that sees Debian's packages:

    /usr/bin/python3 -m venv --system-site-packages VENV
    VENV/bin/pip install --no-build-isolation ./python

QEM_CMAKE_BUILD_DIR names a CMake build folder to reuse (incremental
builds); by default one under setuptools' build_temp is used.
"""
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        if not os.path.exists(os.path.join(ROOT, "CMakeLists.txt")):
            sys.exit("qem: build the package from the qem source tree (python/ inside it)")
        build_dir = os.environ.get("QEM_CMAKE_BUILD_DIR") or os.path.join(
            os.path.abspath(self.build_temp), "cmake")
        subprocess.check_call([
            "cmake", "-S", ROOT, "-B", build_dir,
            "-DCMAKE_BUILD_TYPE=RelWithDebInfo", "-DQEM_PYTHON=ON",
            "-DQEM_BUILD_TESTS=OFF", "-DQEM_BUILD_BENCH=OFF",
            "-DPython3_EXECUTABLE=" + sys.executable])
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "qem_python_ext",
                               "-j", str(os.cpu_count() or 2)])
        name = os.path.basename(self.get_ext_filename(ext.name))
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(os.path.join(build_dir, "python", name), dest)


setup(ext_modules=[Extension("qem._qem", sources=[])], cmdclass={"build_ext": CMakeBuild})
