"""Approval notifications: signed webhooks when an approval is requested, decided or expires
(docs/operations.md#approval-notifications)."""
