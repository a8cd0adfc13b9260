"""Build of the optional compiled core (tracemerge/native/_core.c, _proto.c); everything else is in setup.cfg.

The extension is built with the machine's C compiler. Where there is none (or it fails),
the install still succeeds and tracemerge runs its pure-Python core: one line says so.
"""

import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import CompileError, ExecError, LinkError, PlatformError

NO_CORE = "tracemerge: the compiled core was not built ({}); the pure-Python core will be used"


NO_WRITER = "tracemerge: the compiled .pftrace writer was not built ({}); its loops will run in Python"


class optional_build_ext(build_ext):
    """build_ext that reports a missing or failing compiler in one line instead of failing."""

    def run(self):
        self.failed = {}   # extension name -> why; one line for the whole build, not one per extension
        try:
            super().run()
        except PlatformError as e:  # no compiler configured at all
            print(NO_CORE.format(_reason(e)), file=sys.stderr)
            return
        if "tracemerge.native._core" in self.failed:   # _proto is used only beside _core
            print(NO_CORE.format(self.failed["tracemerge.native._core"]), file=sys.stderr)
        elif self.failed:
            print(NO_WRITER.format(next(iter(self.failed.values()))), file=sys.stderr)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except (CompileError, LinkError, ExecError) as e:  # CC=false, no gcc, a compile error
            self.failed[ext.name] = _reason(e)


def _reason(e):
    text = (str(e).strip().splitlines() or [type(e).__name__])[-1]
    return text if len(text) <= 120 else text[:117] + "..."


FLAGS = ["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers",
         "-Wno-cast-function-type"]

setup(
    # each extension is optional on its own: without _proto the .pftrace writer's loops run in Python
    ext_modules=[Extension("tracemerge.native._core", ["tracemerge/native/_core.c"], extra_compile_args=FLAGS),
                 Extension("tracemerge.native._proto", ["tracemerge/native/_proto.c"], extra_compile_args=FLAGS)],
    cmdclass={"build_ext": optional_build_ext},
)
