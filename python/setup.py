"""Builds forge/_native*.so: forge.h's implementation (forge/_native.c) as a shared library that the
package loads with ctypes. It is not a Python extension module (no Python API is used); setuptools'
extension machinery is used only because it knows the platform's compiler and flags.

CPU by default. FORGE_GPU=nvidia or FORGE_GPU=amd at build time compiles forge_kernels.hip as
position-independent code (nvcc -x cu, or hipcc) and links it in, with forge.h's GPU backend on:
    FORGE_GPU=nvidia FORGE_NVCC_ARCH=-arch=sm_90 pip install ./python
    FORGE_GPU=amd FORGE_HIP_ARCHS=gfx90a pip install ./python
FORGE_KERNELS_OBJ=PATH uses an object compiled elsewhere instead (it must be position-independent:
nvcc -Xcompiler -fPIC, hipcc -fPIC). FORGE_HEADER_DIR names the folder holding forge.h and
forge_kernels.hip when the package is built away from the repository."""

import os
import shutil
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))


def source_dir() -> str:
    for candidate in (os.environ.get("FORGE_HEADER_DIR"), os.path.join(HERE, ".."), HERE):
        if candidate and os.path.exists(os.path.join(candidate, "forge.h")):
            return os.path.abspath(candidate)
    raise RuntimeError("forge.h not found: build from the forge repository (pip install ./python) or set FORGE_HEADER_DIR")


class BuildNative(build_ext):
    """build_ext that compiles the GPU kernels first when FORGE_GPU asks for them."""

    def finalize_options(self) -> None:
        super().finalize_options()
        # always relink: whether the library has the GPU backend is set by the environment, which
        # setuptools' timestamp check cannot see (a CPU build would otherwise be reused for FORGE_GPU)
        self.force = True

    def build_extension(self, ext: Extension) -> None:
        gpu = os.environ.get("FORGE_GPU", "").strip().lower()
        if gpu not in ("", "cpu", "nvidia", "amd"):
            raise RuntimeError(f"FORGE_GPU={gpu!r}: use nvidia, amd or leave it unset (CPU)")
        if gpu in ("nvidia", "amd"):
            obj = os.environ.get("FORGE_KERNELS_OBJ") or self.compile_kernels(gpu)
            ext.define_macros.append(("FORGE_HIP", "1"))
            ext.extra_objects.append(obj)
            if gpu == "nvidia":
                nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
                cuda = os.environ.get("CUDA_HOME") or os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
                cuda_libs = [d for d in (os.path.join(cuda, "lib64"), os.path.join(cuda, "lib")) if os.path.isdir(d)]
                ext.library_dirs += cuda_libs
                ext.runtime_library_dirs += cuda_libs  # the CUDA runtime found where the toolkit is
                ext.libraries += ["cudart", "stdc++"]
            else:
                ext.libraries += ["amdhip64", "stdc++"]
        super().build_extension(ext)

    def compile_kernels(self, gpu: str) -> str:
        src = os.path.join(source_dir(), "forge_kernels.hip")
        os.makedirs(self.build_temp, exist_ok=True)
        obj = os.path.join(self.build_temp, f"forge_kernels_{gpu}_pic.o")
        if gpu == "nvidia":
            arch = os.environ.get("FORGE_NVCC_ARCH", "-arch=sm_90").split()
            if arch == ["-arch=sm_90"]:  # as the Makefile: sm_90a machine code (the warpgroup prompt products) and compute_90 PTX
                arch = ["-gencode", "arch=compute_90a,code=sm_90a", "-gencode", "arch=compute_90,code=compute_90", "--threads", "2"]
            cmd = ["nvcc", "-x", "cu", "-O3", *arch, "-Xcompiler", "-fPIC", "-c", src, "-o", obj]
        else:
            archs = os.environ.get("FORGE_HIP_ARCHS", "gfx90a,gfx942,gfx1100")
            cmd = ["hipcc", f"--offload-arch={archs}", "-O3", "-fPIC", "-c", src, "-o", obj]
            libs = subprocess.run(["sh", "-c", "dpkg -L rocm-device-libs 2>/dev/null | grep -m1 '\\.bc$' | xargs -r dirname"],
                                  capture_output=True, text=True).stdout.strip()
            if libs:  # Debian's hipcc needs to be told where the device libraries are
                cmd.insert(1, f"--rocm-device-lib-path={libs}")
        print("forge: compiling the GPU kernels (several minutes):", " ".join(cmd))
        subprocess.check_call(cmd)
        return obj


native = Extension(
    "forge._native",
    sources=["forge/_native.c"],
    include_dirs=[source_dir()],
    extra_compile_args=["-std=c99", "-O2", "-fno-semantic-interposition"],
    libraries=["m"],
    extra_link_args=["-pthread"],
)

setup(ext_modules=[native], cmdclass={"build_ext": BuildNative})
