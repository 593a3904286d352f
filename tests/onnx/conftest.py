from __future__ import annotations

import pathlib
import sys

# --import-mode=importlib does not put test folders on sys.path; the graph builders live beside the tests.
# (No __init__.py here on purpose: a package named "onnx" would shadow the real onnx package.)
_HERE = str(pathlib.Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
