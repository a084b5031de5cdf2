"""Evidence files an adapter stores for a call (the browser's screenshots), served by
``GET /v1/artifacts/{id}`` to the principal that made them (``gateway.server.artifacts``).

Each artifact is two files under ``var/artifacts/``, both written atomically: the bytes
(``<id>.bin``) and their metadata (``<id>.json``: owner, workspace, sha256, ...).
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from gateway.adapters.shared.fileio import atomic_write, sha256_bytes
from gateway.settings import Settings

_ARTIFACT_ID = re.compile(r"^art_[0-9a-f]{32}$")


@dataclass(frozen=True, slots=True)
class Artifact:
    id: str
    sha256: str
    size: int
    content_type: str
    owner: str
    workspace: str
    execution_id: str

    @property
    def href(self) -> str:
        return f"/v1/artifacts/{self.id}"


class ArtifactStore:
    """Files under ``var/artifacts/``: ``<id>.bin`` and ``<id>.json`` (owner, sha256, ...)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @classmethod
    def of(cls, settings: Settings) -> ArtifactStore:
        return cls(settings.path(settings.var_dir) / "artifacts")

    def save(
        self, data: bytes, *, content_type: str, owner: str, workspace: str, execution_id: str
    ) -> Artifact:
        """Write the bytes, then the metadata (a reader that finds one finds both)."""
        self.root.mkdir(parents=True, exist_ok=True)
        artifact = Artifact(
            id=f"art_{secrets.token_hex(16)}",
            sha256=sha256_bytes(data),
            size=len(data),
            content_type=content_type,
            owner=owner,
            workspace=workspace,
            execution_id=execution_id,
        )
        atomic_write(self.root / f"{artifact.id}.bin", data)
        meta = {k: getattr(artifact, k) for k in Artifact.__slots__}
        atomic_write(self.root / f"{artifact.id}.json", json.dumps(meta).encode("utf-8"))
        return artifact

    def load(self, artifact_id: str) -> tuple[Artifact, bytes] | None:
        """The artifact and its bytes, or None for an unknown or malformed id."""
        if not _ARTIFACT_ID.match(artifact_id):
            return None
        try:
            meta = json.loads((self.root / f"{artifact_id}.json").read_text("utf-8"))
            data = (self.root / f"{artifact_id}.bin").read_bytes()
        except (OSError, ValueError):
            return None
        return Artifact(**meta), data
