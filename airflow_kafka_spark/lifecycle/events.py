"""Names the lifecycle record stores: audit event names and driver kinds.

Both are :class:`~enum.StrEnum` so the JSON on disk keeps exactly the strings older releases wrote
(``"lease_acquired"``, ``"local-pid"``), while code compares typed values, not free strings.
"""

from __future__ import annotations

from enum import StrEnum


class LifecycleEvent(StrEnum):
    """An audit event in ``LifecycleRecord.history`` (``entry["event"]``)."""

    LEASE_ACQUIRED = "lease_acquired"
    LEASE_TAKEN_OVER = "lease_taken_over"
    LEASE_RELEASED = "lease_released"
    LEASE_BROKEN = "lease_broken"
    EXPIRED_LEASE_CLEARED = "expired_lease_cleared"
    NEXT_STARTING_OFFSETS_SET = "next_starting_offsets_set"
    NEXT_STARTING_OFFSETS_USED = "next_starting_offsets_used"
    KAFKA_IDENTITY_RECORDED = "kafka_identity_recorded"
    DRIVER_SUBMITTED = "driver_submitted"
    APPLICATION_PROMOTED = "application_promoted"
    DRIVER_STOPPED = "driver_stopped"
    CHECKPOINT_RESET = "checkpoint_reset"
    DATA_LOSS_ACCEPTED = "data_loss_accepted"
    CHECKPOINT_RESTORED = "checkpoint_restored"
    VERDICT_OVERRIDDEN = "verdict_overridden"
    HEALTH_GATE_PASSED = "health_gate_passed"
    HEALTH_GATE_FAILED = "health_gate_failed"
    SAFE_RESTART = "safe_restart"
    SAFE_RESTART_ROLLED_BACK = "safe_restart_rolled_back"


class DriverKind(StrEnum):
    """What ran a driver; the value is what the lifecycle record stores (``DriverInfo.kind``)."""

    LOCAL = "local-pid"
    YARN = "yarn"
    K8S = "k8s"
    STANDALONE = "standalone"
