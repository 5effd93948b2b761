"""The controller: findings in, decisions and signed commands out (``service``), with its two threads beside the
loop: ``housekeeping`` (retention, command expiry, the outbox) and ``drain_watch`` (nodes drained by hand)."""
