"""The build hook that compiles the broadcast's C entry at install time (gpulab/bcast/runtime/build.py).

An editable install (``pip install -e .``) writes the module beside fastpath.c in the source tree; a
wheel carries it and is marked for this platform. Where it cannot be built (no MPI compiler wrapper,
no headers) the install goes on with a warning, and gpulab's Python entry runs.
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

RUNTIME = Path("gpulab", "bcast", "runtime")


class CFastPathHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        if self.target_name != "wheel":
            return
        # by its path: gpulab itself is not installed yet, and build.py imports nothing of it
        spec = importlib.util.spec_from_file_location("_gpulab_build", Path(self.root, RUNTIME, "build.py"))
        build = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(build)
        if version == "editable":
            target = build.default_target()
        else:
            self._work = tempfile.TemporaryDirectory()
            target = Path(self._work.name, build.module_name())
        try:
            build.build(target)
        except build.BuildError as error:
            print(f"WARNING: gpulab's broadcast entry in C was not built, the Python entry will run: {error}\n"
                  f"  (build it later with `{build.REBUILD}`)", file=sys.stderr)
            return
        if version != "editable":
            for path in (target, build.record_of(target)):
                build_data["force_include"][str(path)] = str(RUNTIME / path.name)
            build_data["pure_python"] = False
            build_data["infer_tag"] = True

    def finalize(self, version: str, build_data: dict, artifact_path: str) -> None:
        if getattr(self, "_work", None) is not None:
            self._work.cleanup()
