"""The tamper-evident audit trail: chains checked, checkpoints signed, events exported."""
