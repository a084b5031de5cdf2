"""Approval tokens: signed, single-use approvals an agent resubmits with its call (deciding
approvals is gateway.runtime.approvals)."""
