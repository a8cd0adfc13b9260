"""Build of the optional compiled core (tracemerge/kernel/_core.c); everything else is in setup.cfg.

The extension is built with the machine's C compiler. Where there is none (or it fails),
the install still succeeds and tracemerge runs its pure-Python core: one line says so.
"""

import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

NO_KERNEL = "tracemerge: the compiled core was not built ({}); the pure-Python core will be used"


class optional_build_ext(build_ext):
    """build_ext that reports a missing or failing compiler in one line instead of failing."""

    def run(self):
        try:
            super().run()
        except Exception as e:  # distutils' platform errors: no compiler configured at all
            print(NO_KERNEL.format(_reason(e)), file=sys.stderr)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as e:  # CompileError, LinkError, DistutilsExecError (CC=false, no gcc)
            print(NO_KERNEL.format(_reason(e)), file=sys.stderr)


def _reason(e):
    return (str(e).strip().splitlines() or [type(e).__name__])[-1][:200]


setup(
    ext_modules=[Extension("tracemerge.kernel._core", ["tracemerge/kernel/_core.c"],
                           extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter",
                                               "-Wno-missing-field-initializers", "-Wno-cast-function-type"])],
    cmdclass={"build_ext": optional_build_ext},
)
