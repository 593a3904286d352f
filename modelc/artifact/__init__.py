"""modelc.artifact: the .modelc file (reader, writer, verify) and pack (read -> transform -> write)."""

from __future__ import annotations

from modelc.artifact.reader import Artifact, open_artifact
from modelc.artifact.verify import VerifyReport, verify_artifact
from modelc.artifact.writer import ArtifactWriteError, write_artifact

__all__ = ["Artifact", "ArtifactWriteError", "VerifyReport", "open_artifact", "verify_artifact", "write_artifact"]
