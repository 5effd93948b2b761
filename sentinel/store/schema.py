"""The SQL schema (SQLAlchemy Core). Alembic migrations in ``migrations/`` must produce exactly this.

Primary keys of findings, incidents, decisions, commands and results are the records' stable ids, so writing
the same record twice (a redelivered message) is a no-op.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    false,
)

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

ID = String(200)
NAME = String(63)
ENUM = String(32)

nodes = Table(
    "nodes",
    metadata,
    Column("name", NAME, primary_key=True),
    Column("first_seen_ts", Float, nullable=False),
    Column("last_seen_ts", Float, nullable=False),
    Column("gpu_count", Integer, nullable=False, default=0),
    Column("boot_id", String(64), nullable=False, default=""),
    Column("drained_incident_id", ID, nullable=True),  # set while Sentinel holds the node drained
)

# The nodes the scheduler manages, as the controller's drain watch last listed them (issue 19): the detector
# dead-letters samples from any other name once this holds any row.
scheduler_nodes = Table(
    "scheduler_nodes",
    metadata,
    Column("name", NAME, primary_key=True),
    Column("listed_ts", Float, nullable=False),
)

gpus = Table(
    "gpus",
    metadata,
    Column("node", NAME, ForeignKey("nodes.name", ondelete="CASCADE"), primary_key=True),
    Column("gpu_index", Integer, primary_key=True),
    Column("uuid", String(128), nullable=False, default=""),
    Column("pci_bus_id", String(64), nullable=False, default=""),
    Column("model", String(128), nullable=False, default=""),
    Column("state", ENUM, nullable=False),
    Column("last_seen_ts", Float, nullable=False),
    Column("temp_c", Float, nullable=True),
)

incidents = Table(
    "incidents",
    metadata,
    Column("id", ID, primary_key=True),
    Column("node", NAME, ForeignKey("nodes.name"), nullable=False),
    Column("opened_ts", Float, nullable=False),
    Column("updated_ts", Float, nullable=False),
    Column("status", ENUM, nullable=False),
    Column("severity", ENUM, nullable=False),
    Column("kind", ENUM, nullable=False),
    Column("summary", Text, nullable=False),
    Column("alert_ts", Float, nullable=True),  # graded into an operator-facing alert then; NULL: evidence only
    Column("alert_reason", Text, nullable=False, server_default=""),
    Column("alert_held", Boolean, nullable=False, server_default=false()),
    Index(None, "node", "opened_ts"),
    Index(None, "status"),
)

findings = Table(
    "findings",
    metadata,
    Column("id", ID, primary_key=True),
    Column("node", NAME, ForeignKey("nodes.name"), nullable=False),
    Column("incident_id", ID, ForeignKey("incidents.id"), nullable=True),
    Column("ts", Float, nullable=False),
    Column("observed_ts", Float, nullable=False),
    Column("gpu_index", Integer, nullable=True),
    Column("kind", ENUM, nullable=False),
    Column("rule", String(100), nullable=False),
    Column("severity", ENUM, nullable=False),
    Column("recommendation", ENUM, nullable=False),
    Column("confidence", Float, nullable=False),
    Column("summary", Text, nullable=False),
    Column("evidence", JSON, nullable=False),
    Index(None, "node", "ts"),
    Index(None, "incident_id"),  # retention deletes an incident's findings with it
)

decisions = Table(
    "decisions",
    metadata,
    Column("id", ID, primary_key=True),
    Column("incident_id", ID, ForeignKey("incidents.id"), nullable=False),
    Column("node", NAME, nullable=False),
    Column("ts", Float, nullable=False),
    Column("action", ENUM, nullable=False),
    Column("mode", ENUM, nullable=False),
    Column("reason", Text, nullable=False),
    Column("blocked_by", JSON, nullable=False),
    Column("acked_ts", Float, nullable=True),  # operator requests: when a person said it was done
    Column("acked_by", String(100), nullable=True),
    Index(None, "node", "ts"),
    Index(None, "incident_id"),
)

commands = Table(
    "commands",
    metadata,
    Column("id", ID, primary_key=True),
    Column("decision_id", ID, ForeignKey("decisions.id"), nullable=False),
    Column("incident_id", ID, nullable=False),
    Column("node", NAME, nullable=False),
    Column("action", ENUM, nullable=False),
    Column("ts", Float, nullable=False),
    Column("expires_ts", Float, nullable=False),
    Column("drain_reason", Text, nullable=False),
    Column("status", ENUM, nullable=False),  # pending | done | failed | expired | refused (no valid seal)
    Column("sent_ts", Float, nullable=True),  # last publish (outbox): None until sent; re-sent while pending
    Column("seal", LargeBinary, nullable=True),  # the controller's seal of the command: a row without one is refused
    Index(None, "status"),
    Index(None, "incident_id"),
)

action_results = Table(
    "action_results",
    metadata,
    Column("id", ID, primary_key=True),
    Column("command_id", ID, ForeignKey("commands.id"), nullable=False),
    Column("node", NAME, nullable=False),
    Column("ts", Float, nullable=False),
    Column("step", ENUM, nullable=False),
    Column("status", ENUM, nullable=False),
    Column("detail", Text, nullable=False),
    Column("job_ids", JSON, nullable=False),
    Index(None, "command_id"),
)

breaker_state = Table(
    "breaker_state",
    metadata,
    Column("id", Integer, primary_key=True),  # a single row, id = 1
    Column("is_open", Boolean, nullable=False),
    Column("reason", Text, nullable=False),
    Column("changed_ts", Float, nullable=False),
    Column("recent", JSON, nullable=False),  # [[ts, node], ...] actions inside the sliding window
)

# The actuator's journal: a command it accepted, and each step it carried out, written before the next step,
# so a command interrupted by a crash resumes at its next step instead of starting over or being lost.
actuator_commands = Table(
    "actuator_commands",
    metadata,
    Column("command_id", ID, primary_key=True),
    Column("node", NAME, nullable=False),
    Column("payload", LargeBinary, nullable=False),  # the Command, codec-encoded
    Column("expires_ts", Float, nullable=False),
    Column("accepted_ts", Float, nullable=False),
    Column("finished_ts", Float, nullable=True),  # set once the verify step is recorded
    Column("owner", String(200), nullable=True),  # the actuator carrying it out (a lease, so only one does)
    Column("lease_until_ts", Float, nullable=True),
    Column("envelope", LargeBinary, nullable=True),  # the SignedCommand as received: re-verified on every resume
    Index(None, "finished_ts"),
)

actuator_steps = Table(
    "actuator_steps",
    metadata,
    Column("command_id", ID, ForeignKey("actuator_commands.command_id"), primary_key=True),
    Column("step", ENUM, primary_key=True),
    Column("payload", LargeBinary, nullable=False),  # the step's ActionResult, codec-encoded
)

command_nonces = Table(
    "command_nonces",
    metadata,
    Column("nonce", String(32), primary_key=True),  # of a signed command the actuator accepted
    Column("expires_ts", Float, nullable=False),  # kept until then; a replay after it fails on expiry anyway
    Column("seen_ts", Float, nullable=False),
    Index(None, "expires_ts"),
)


# ----- load and forecasts (issue 8) -----------------------------------------------------------------------------
# One row per partition per 10-minute bin: what the scheduler queue and the telemetry showed. ``ts`` is the bin
# start (seconds since the epoch, a multiple of the bin width); "all" is the whole cluster.
load_bins = Table(
    "load_bins",
    metadata,
    Column("ts", Float, primary_key=True),
    Column("partition", NAME, primary_key=True),
    Column("running_gpus", Float, nullable=False),
    Column("pending_gpus", Float, nullable=False),
    Column("submissions", Integer, nullable=True),  # jobs submitted inside the bin (None when unknown)
    Column("total_gpus", Float, nullable=True),  # capacity the scheduler reports for the partition
    Column("util", Float, nullable=True),  # mean GPU utilisation 0..1 over the bin's telemetry (None when none)
    Column("source", String(32), nullable=False),  # squeue | sim | trace
)

# Forecasts as they were made (scored later against the bins that arrive).
forecasts = Table(
    "forecasts",
    metadata,
    Column("made_ts", Float, primary_key=True),
    Column("partition", NAME, primary_key=True),
    Column("target", String(32), primary_key=True),
    Column("ts", Float, primary_key=True),  # the bin forecast
    Column("point", Float, nullable=False),
    Column("lo", Float, nullable=False),
    Column("hi", Float, nullable=False),
    Column("method", String(32), nullable=False),
)

# The fitted demand forecaster per partition (``DemandForecaster.to_bytes``), so ``sentinel forecast`` need not
# fit (nor import scikit-learn) while it is fresh. ``fitted_ts``: start of the newest bin the fit saw.
forecast_models = Table(
    "forecast_models",
    metadata,
    Column("partition", NAME, primary_key=True),
    Column("fitted_ts", Float, nullable=False),
    Column("fitted_bins", Integer, nullable=False),
    Column("made_ts", Float, nullable=False),
    Column("anchors", String(200), nullable=False),  # comma-separated horizons in bins, e.g. "1,6,18"
    Column("blob", LargeBinary, nullable=False),
)

# The job table (issue 21): every GPU job the queue recorder saw, one row per job id. ``end_ts`` is set at the
# first snapshot that no longer lists the job (it ended, or left the queue without running, before then);
# ``start_ts`` stays None for a job never seen running.
queue_jobs = Table(
    "queue_jobs",
    metadata,
    Column("job_id", String(64), primary_key=True),
    Column("partition", NAME, nullable=False),
    Column("gpus", Float, nullable=False),
    Column("submit_ts", Float, nullable=True),
    Column("start_ts", Float, nullable=True),
    Column("time_limit_s", Float, nullable=True),
    Column("first_seen_ts", Float, nullable=False),
    Column("last_seen_ts", Float, nullable=False),
    Column("end_ts", Float, nullable=True),
)
