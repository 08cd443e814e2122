"""Will the next start of a broker be clean? Kafka's rule, applied to what elrwatch knows.

Kafka (KIP-966): at a clean shutdown each log dir gets ``.kafka_cleanshutdown`` holding the broker's epoch; at
start-up the log manager deletes it. The next registration carries ``previousBrokerEpoch``: the epoch every log dir's
file agrees on, or -1 when a dir is missing the file (or is offline), a file cannot be read, or the epochs differ
(``LogManager.readBrokerEpochFromCleanShutdownFiles``). The controller treats the registration as clean only when
that equals the epoch it holds for the broker (``ClusterControlManager.registerBroker``); a broker without a current
registration has no epoch to match, so its next start is always unclean. An unclean registration removes the broker
from every ISR and ELR (elr-semantics.md §5).

What elrwatch knows of the files comes from ``elrwatch agent`` beside the broker (CLEAN_SHUTDOWN_RECORD, kept on the
broker's registration as ``clean_shutdown``). Without a report the metadata says what it can: a broker fenced at the
end of a controlled shutdown most likely stopped cleanly; one fenced without it (a session timeout) crashed, was
paused, or stopped while leading nothing, which the log cannot tell apart.

Pure: no I/O. ``epochs_known`` is False when the source shows no real registration epochs (the admin bridge).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from elrwatch.state.model import BrokerState

#: The report's fields (CLEAN_SHUTDOWN_RECORD data, as kept on the broker).
REGISTRATION_EPOCH: Final = "registrationEpoch"
CLEAN_SHUTDOWN_EPOCH: Final = "cleanShutdownEpoch"
LOG_DIRS: Final = "logDirs"
LOG_DIRS_WITH_FILE: Final = "logDirsWithFile"


@dataclass(frozen=True, slots=True)
class NextStart:
    """The prediction: ``clean`` True, False or None (not known), and ``basis``, what it rests on, in words."""

    clean: bool | None
    basis: str

    def doc(self) -> dict[str, Any]:
        """The API's ``nextStart`` object."""
        return {"clean": self.clean, "basis": self.basis}


def report_of(data: Mapping[str, Any], timestamp_ms: int | None) -> dict[str, Any]:
    """What the broker keeps of a CLEAN_SHUTDOWN_RECORD (its data without the broker id, and when it was read)."""
    return {
        REGISTRATION_EPOCH: data[REGISTRATION_EPOCH],
        CLEAN_SHUTDOWN_EPOCH: data.get(CLEAN_SHUTDOWN_EPOCH),
        LOG_DIRS: data[LOG_DIRS],
        LOG_DIRS_WITH_FILE: data[LOG_DIRS_WITH_FILE],
        "timestampMs": timestamp_ms,
    }


def _from_report(broker: BrokerState, report: Mapping[str, Any], epochs_known: bool) -> NextStart | None:
    """Kafka's rule on the agent's reading of the files; None when the report is of an earlier registration."""
    registered = report[REGISTRATION_EPOCH]
    if epochs_known and registered != broker.epoch:
        return None
    dirs, with_file, epoch = report[LOG_DIRS], report[LOG_DIRS_WITH_FILE], report[CLEAN_SHUTDOWN_EPOCH]
    if with_file < dirs or dirs == 0:
        return NextStart(
            False,
            f"agent: {dirs - with_file} of {dirs} log dirs have no .kafka_cleanshutdown (the broker was killed or "
            "crashed, or has not finished stopping): Kafka registers it uncleanly and it loses its ELR seats",
        )
    if epoch is None:
        return NextStart(
            False,
            f"agent: the .kafka_cleanshutdown files of the {dirs} log dirs disagree or cannot be read: Kafka "
            "registers the broker uncleanly and it loses its ELR seats",
        )
    if epochs_known:
        expected, whose = broker.epoch, "the registration's epoch"
    else:
        expected, whose = registered, "the epoch of its registration in the broker's own metadata log"
    if epoch == expected:
        tail = "" if epochs_known else " (this source shows no registration epochs, so the agent's view is used)"
        return NextStart(
            True, f"agent: every log dir ({dirs}) has .kafka_cleanshutdown with epoch {epoch}, {whose}{tail}"
        )
    return NextStart(
        False,
        f"agent: the log dirs' .kafka_cleanshutdown holds epoch {epoch}, not {expected} ({whose}): Kafka registers "
        "the broker uncleanly and it loses its ELR seats",
    )


def next_start(broker: BrokerState | None, epochs_known: bool = True) -> NextStart:
    """Will the next registration of ``broker`` be clean (Kafka's rule, module docstring)?"""
    if broker is None or not broker.registered:
        return NextStart(
            False,
            "not registered: Kafka holds no epoch to match, so its next registration is unclean whatever the files say",
        )
    if broker.active:
        return NextStart(
            None, "running: a clean stop (SIGTERM) makes its next start clean, a crash or kill -9 an unclean one"
        )
    if not broker.fenced:  # in controlled shutdown, not fenced yet: still stopping
        return NextStart(
            None, "stopping (controlled shutdown in progress): clean if it completes, unclean if it is killed"
        )
    # an epoch the source does not know (the admin bridge: none, or one it made up) cannot be matched
    epochs_known = epochs_known and broker.epoch is not None and broker.epoch >= 0
    report = broker.clean_shutdown
    if report is not None:
        found = _from_report(broker, report, epochs_known)
        if found is not None:
            return found
    stale = (
        f"the agent's last report is of an earlier registration (epoch {report[REGISTRATION_EPOCH]}); "
        if report is not None
        else "no agent report; "
    )
    if broker.in_controlled_shutdown:
        return NextStart(
            True,
            stale + "fenced at the end of a controlled shutdown: likely clean (unclean if it was killed before its "
            "log dirs were closed)",
        )
    unknown = "" if epochs_known else " Its registration epoch is not known here (admin bridge)."
    return NextStart(
        None,
        stale + "fenced without a controlled shutdown (session timeout): a crash restarts unclean, a paused process "
        "may come back with its epoch, and a stop of a broker that led nothing looks the same in the metadata."
        + unknown,
    )


def epochs_known(unknown_facts: Iterable[str]) -> bool:
    """Whether registration epochs are real: not among what the source cannot know (`positions.polled_unknown`)."""
    return "brokerEpoch" not in set(unknown_facts)


def predictions(brokers: Mapping[int, BrokerState], epochs_known: bool = True) -> dict[int, NextStart]:
    """Every broker that is not active → its next start."""
    return {b: next_start(state, epochs_known) for b, state in brokers.items() if not state.active}


def doomed(brokers: Mapping[int, BrokerState], epochs_known: bool = True) -> frozenset[int]:
    """Stopped brokers whose next start is predicted unclean (they lose their ISR and ELR seats when they return)."""
    return frozenset(b for b, start in predictions(brokers, epochs_known).items() if start.clean is False)


__all__ = ["NextStart", "doomed", "epochs_known", "next_start", "predictions", "report_of"]
