"""The approvals page under ``/ui/``: server-rendered templates, vendored htmx, no build step."""
