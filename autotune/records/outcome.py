"""``Outcome``: what became of a trial, one word, and its wording for people (the only place both are spelled)."""

from __future__ import annotations

from enum import StrEnum

from optuna.trial import FrozenTrial, TrialState

from autotune.errors import FailureKind


class Outcome(StrEnum):
    """What became of a trial, one short word: its ``outcome`` attribute (a filter in optuna-dashboard, where a
    rejected or crashed trial is otherwise "Complete" with a pessimistic value). A trial that did not serve has its
    ``FailureKind``'s word (``rejected`` included: a static rule, a learned rule or OOM dominance, named in
    ``rejected_by``); ``text`` is the outcome in words, for people."""

    MEASURED = "measured"  # served, and its best load meets the SLOs
    MISSES_SLO = "misses_slo"  # served, but no load met the SLOs (the closest one is kept)
    DUPLICATE = "duplicate"  # the configuration of an earlier trial (``duplicate_of``), not launched again
    PRUNED = "pruned"  # stopped part-way through its first benchmark by the pruner
    ERROR = "error"  # a bug in the tuner (a FAIL trial); set by the study, which tells Optuna
    # a failure: the FailureKind of the same name (tests check that every kind has its outcome)
    REJECTED = FailureKind.REJECTED.value
    OOM = FailureKind.OOM.value
    UNSUPPORTED = FailureKind.UNSUPPORTED.value
    BAD_FLAG = FailureKind.BAD_FLAG.value
    PORT_IN_USE = FailureKind.PORT_IN_USE.value
    NCCL = FailureKind.NCCL.value
    TIMEOUT = FailureKind.TIMEOUT.value
    HANG = FailureKind.HANG.value
    CRASH = FailureKind.CRASH.value
    NOT_INSTALLED = FailureKind.NOT_INSTALLED.value
    NO_DATA = FailureKind.NO_DATA.value
    CLIENT_INPUT = FailureKind.CLIENT_INPUT.value

    @classmethod
    def failed(cls, kind: FailureKind) -> Outcome:
        """The outcome of a trial that failed for ``kind``."""
        return cls(kind.value)

    @property
    def failure(self) -> bool:
        """Whether the trial produced no measurement of its own configuration (a failure of some kind)."""
        return self.value in FailureKind._value2member_map_

    @property
    def text(self) -> str:
        """The outcome in words, as a headline says it."""
        return _WORDS[self]

    @classmethod
    def of(cls, trial: FrozenTrial) -> Outcome | str:
        """What became of ``trial``: its stored outcome, or for a trial stored without one (an older autotune, a
        trial still running), the word its state and failure say ("running", "waiting" while it has none)."""
        attrs = trial.user_attrs  # read here, not through TrialRecord: this runs for every trial of a table
        if attrs.get("outcome"):
            return cls._value2member_map_.get(attrs["outcome"], attrs["outcome"])
        if trial.state == TrialState.PRUNED:
            return cls.PRUNED
        if trial.state == TrialState.FAIL:
            return cls.ERROR
        if "duplicate_of" in attrs:
            return cls.DUPLICATE
        if attrs.get("failure_kind"):
            return cls._value2member_map_.get(attrs["failure_kind"], attrs["failure_kind"])
        if trial.state == TrialState.COMPLETE:
            met = all(v <= 0 for v in (trial.constraints or {}).values())
            return cls.MEASURED if met else cls.MISSES_SLO
        return trial.state.name.lower()


_WORDS = {Outcome.MEASURED: "Measured", Outcome.MISSES_SLO: "Misses its SLO", Outcome.DUPLICATE: "Duplicate",
          Outcome.PRUNED: "Pruned", Outcome.ERROR: "Error in the tuner", Outcome.REJECTED: "Rejected",
          Outcome.CRASH: "Crashed", Outcome.OOM: "Out of memory", Outcome.TIMEOUT: "Not ready in time",
          Outcome.HANG: "Hung: ready, but no tokens", Outcome.UNSUPPORTED: "Refused by the engine",
          Outcome.BAD_FLAG: "A flag refused by the engine", Outcome.PORT_IN_USE: "Port in use",
          Outcome.NCCL: "NCCL failure", Outcome.NO_DATA: "No data in the performance model",
          Outcome.NOT_INSTALLED: "Engine not installed",
          Outcome.CLIENT_INPUT: "The benchmark's input failed"}  # fmt: skip
