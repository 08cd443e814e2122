"""What a record applied to the metadata image changed that partitions read (`Effects`): the one thing every
area writes and every partition store reads."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Effects:
    """What the record just applied changed that partitions read (reset before each record)."""

    #: Brokers whose registration changed: their partitions derive again (liveness, the KIP-903 audit).
    brokers: list[int] = field(default_factory=list)
    #: Topics whose effective min ISR or unclean setting may have changed: their partitions derive again.
    topics: list[str] = field(default_factory=list)
    #: Every partition derives again (the cluster default's min ISR / unclean setting, the ELR feature).
    everything: bool = False
    #: Topics removed (id, name): their partitions go.
    removed_topics: list[tuple[str, str]] = field(default_factory=list)
    #: Topics whose partitions clear their ELR and last known ELR (ClearElrRecord); None: none.
    clear_elr: list[str] | None = None

    def __bool__(self) -> bool:
        return bool(self.brokers or self.topics or self.everything or self.removed_topics or self.clear_elr is not None)

    def reset(self) -> None:
        """Forget (before the next record)."""
        self.brokers = []
        self.topics = []
        self.everything = False
        self.removed_topics = []
        self.clear_elr = None
