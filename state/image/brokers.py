"""Broker registrations (RegisterBroker, BrokerRegistrationChange, Fence, Unfence, UnregisterBroker records) and
what the partitions read of them: who is active (may lead), who is eligible (registered and unfenced: may be in
an ISR, KIP-903), and each broker's cause code for the operator insight (state/insight.py). Also each broker's
agent report of its log dirs' clean-shutdown files (CLEAN_SHUTDOWN_RECORD), from which `next_start` predicts
whether its next registration is clean."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from elrwatch.state import insight, next_start
from elrwatch.state.model import BrokerState
from elrwatch.state.outcome import Outcome, is_duplicate, record_error
from elrwatch.state.record_types import FENCE_BROKER_RECORD
from elrwatch.state.records import Record, RecordError

if TYPE_CHECKING:
    from elrwatch.state.image.effects import Effects


class Brokers:
    """Broker id → registration, with the liveness sets kept in step (their delta: ``changed``)."""

    def __init__(self, effects: Effects) -> None:
        self.by_id: dict[int, BrokerState] = {}
        #: Brokers changed since the last `drain` (the delta the buckets emit).
        self.changed: set[int] = set()
        #: Broker id → its agent's last CLEAN_SHUTDOWN_RECORD (`next_start.report_of`), also for a broker not
        #: registered yet: a registration takes it over (``BrokerState.clean_shutdown``).
        self.clean_shutdown: dict[int, dict[str, object]] = {}
        self._effects = effects
        self.reindex()

    def reindex(self) -> None:
        """Rebuild the liveness sets from the registrations (after a load)."""
        brokers = self.by_id.values()
        self.active: set[int] = {b.broker_id for b in brokers if b.active}
        #: ``broker in active``, bound once (the set is only ever updated in place).
        self.is_active = self.active.__contains__
        self.eligible: set[int] = {b.broker_id for b in brokers if b.registered and not b.fenced}
        self.causes: dict[int, int] = insight.cause_codes(brokers)

    def __getstate__(self) -> dict[str, object]:
        return {
            "by_id": self.by_id,
            "changed": self.changed,
            "effects": self._effects,
            "clean_shutdown": self.clean_shutdown,
        }

    def __setstate__(self, state: dict[str, object]) -> None:
        self.by_id = state["by_id"]  # type: ignore[assignment]
        self.changed = state["changed"]  # type: ignore[assignment]
        self.clean_shutdown = state.get("clean_shutdown", {})  # type: ignore[assignment]
        self._effects = state["effects"]  # type: ignore[assignment]
        self.reindex()

    def is_ineligible(self, broker_id: int) -> bool:
        """A known broker that is fenced or unregistered (an unknown id counts once any broker is known)."""
        return bool(self.by_id) and broker_id not in self.eligible

    def drain(self) -> list[BrokerState]:
        """The brokers changed since the previous call, by id; forgets them."""
        out = [self.by_id[b] for b in sorted(self.changed) if b in self.by_id]
        self.changed = set()
        return out

    def changed_by(self, broker: BrokerState, record: Record) -> None:
        """``record`` changed ``broker``: stamp its offset, keep the liveness sets, re-derive its partitions."""
        if record.offset is not None:
            broker.last_offset = record.offset
        broker_id = broker.broker_id
        if broker.active:
            self.active.add(broker_id)
        else:
            self.active.discard(broker_id)
        if broker.registered and not broker.fenced:
            self.eligible.add(broker_id)
        else:
            self.eligible.discard(broker_id)
        self.causes[broker_id] = insight.broker_cause(broker)
        self.changed.add(broker_id)
        self._effects.brokers.append(broker_id)

    def registered(self, record: Record, id_field: str, epoch_field: str) -> BrokerState | RecordError | Outcome:
        """The registered broker a record names (by ``id_field``, at the epoch in ``epoch_field``), or why not."""
        broker_id = record.data[id_field]
        broker = self.by_id.get(broker_id)
        if broker is None or not broker.registered:
            if broker is not None and is_duplicate(broker.last_offset, record):
                return Outcome.DUPLICATE
            return record_error(record, "unknown_broker", id_field, f"broker {broker_id} is not registered")
        if is_duplicate(broker.last_offset, record):
            return Outcome.DUPLICATE
        if broker.epoch != record.data[epoch_field]:
            return record_error(
                record,
                "conflict",
                epoch_field,
                f"broker {broker_id} epoch is {broker.epoch}, record has {record.data[epoch_field]}",
            )
        return broker

    # --- handlers (record_types names them) -----------------------------------------------------------------

    def apply_register(self, record: Record) -> Outcome | RecordError:
        """RegisterBrokerRecord: a new registration replaces the broker's."""
        data = record.data
        broker_id = data["brokerId"]
        existing = self.by_id.get(broker_id)
        if existing is not None and is_duplicate(existing.last_offset, record):
            return Outcome.DUPLICATE
        broker = BrokerState(
            broker_id=broker_id,
            epoch=data["brokerEpoch"],
            incarnation_id=data["incarnationId"],
            fenced=data.get("fenced", True),
            in_controlled_shutdown=data.get("inControlledShutdown", False),
            registered=True,
            rack=data.get("rack"),
            last_offset=record.offset,
            clean_shutdown=self.clean_shutdown.get(broker_id),
        )
        self.by_id[broker_id] = broker
        self.changed_by(broker, record)
        return Outcome.APPLIED

    def update(
        self,
        record: Record,
        change: Callable[[BrokerState], None],
        id_field: str = "brokerId",
        epoch_field: str = "brokerEpoch",
    ) -> Outcome | RecordError:
        """A record that changes a registered broker (named by ``id_field`` at the epoch in ``epoch_field``):
        ``change`` applied to it, the liveness kept in step, its partitions derived again; or why not."""
        broker = self.registered(record, id_field, epoch_field)
        if not isinstance(broker, BrokerState):
            return broker
        change(broker)
        self.changed_by(broker, record)
        return Outcome.APPLIED

    def apply_change(self, record: Record) -> Outcome | RecordError:
        """BrokerRegistrationChangeRecord: fenced (1 fences, -1 unfences) and controlled shutdown (1 sets)."""
        fenced = record.data.get("fenced", 0)
        shutdown = record.data.get("inControlledShutdown", 0) == 1

        def change(broker: BrokerState) -> None:
            if fenced:
                broker.fenced = fenced == 1
            broker.in_controlled_shutdown |= shutdown

        return self.update(record, change)

    def apply_fence(self, record: Record) -> Outcome | RecordError:
        """FenceBrokerRecord / UnfenceBrokerRecord."""
        fenced = record.type == FENCE_BROKER_RECORD
        return self.update(record, lambda broker: setattr(broker, "fenced", fenced), "id", "epoch")

    def apply_unregister(self, record: Record) -> Outcome | RecordError:
        """UnregisterBrokerRecord: the registration stays, marked unregistered."""
        return self.update(record, lambda broker: setattr(broker, "registered", False))

    def apply_clean_shutdown(self, record: Record) -> Outcome:
        """CLEAN_SHUTDOWN_RECORD (elrwatch's own, from the broker's agent): kept as the broker's report, the newest
        wins (it changes no partition: the advice and the gauge read it through `next_start`)."""
        broker_id = record.data["brokerId"]
        report = next_start.report_of(record.data, record.timestamp_ms)
        self.clean_shutdown[broker_id] = report
        broker = self.by_id.get(broker_id)
        if broker is not None:
            broker.clean_shutdown = report
            self.changed.add(broker_id)
        return Outcome.APPLIED

    def next_start(self, broker_id: int, epochs_known: bool = True) -> next_start.NextStart:
        """Will the broker's next registration be clean (`next_start.next_start`)?"""
        return next_start.next_start(self.by_id.get(broker_id), epochs_known)
