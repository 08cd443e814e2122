"""The finalized features (FeatureLevelRecord): whether ELR is on, the metadata version."""

from __future__ import annotations

from typing import TYPE_CHECKING

from elrwatch.state.outcome import Outcome, is_duplicate
from elrwatch.state.record_types import ELR_FEATURE, METADATA_VERSION
from elrwatch.state.records import Record

if TYPE_CHECKING:
    from elrwatch.state.image.effects import Effects


class Features:
    """Feature name → finalized level (a level of 0 removes it), each with the offset that last set it."""

    def __init__(self, effects: Effects) -> None:
        self.levels: dict[str, int] = {}
        self.offsets: dict[str, int] = {}
        self._effects = effects

    @property
    def elr_enabled(self) -> bool:
        """Whether the finalized eligible.leader.replicas.version is >= 1 (elr-semantics §3)."""
        return self.levels.get(ELR_FEATURE, 0) >= 1

    @property
    def metadata_version(self) -> int | None:
        """The finalized metadata.version feature level, if known."""
        return self.levels.get(METADATA_VERSION)

    def apply_feature_level(self, record: Record) -> Outcome:
        """FeatureLevelRecord: set (or remove, level 0) a feature; the ELR feature re-derives every partition."""
        name, level = record.data["name"], record.data["featureLevel"]
        if is_duplicate(self.offsets.get(name), record):
            return Outcome.DUPLICATE
        if record.offset is not None:
            self.offsets[name] = record.offset
        if level == 0:
            self.levels.pop(name, None)
        else:
            self.levels[name] = level
        if name == ELR_FEATURE:
            self._effects.everything = True
        return Outcome.APPLIED
