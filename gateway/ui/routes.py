"""The page's routes, mounted by ``gateway/server/app.py`` (docs/operations.md)."""

from __future__ import annotations

from starlette.routing import Route

from gateway.ui import approval_pages, pages

ROUTES = [
    Route("/ui/", pages.home, methods=["GET"]),
    Route("/ui/signin", pages.signin_form, methods=["GET"]),
    Route("/ui/signin", pages.signin, methods=["POST"]),
    Route("/ui/signout", pages.signout, methods=["POST"]),
    Route("/ui/approvals", approval_pages.inbox, methods=["GET"]),
    Route("/ui/approvals/{approval_id}", approval_pages.approval_page, methods=["GET"]),
    Route("/ui/approvals/{approval_id}/decide", approval_pages.decide, methods=["POST"]),
    Route("/ui/executions", pages.executions, methods=["GET"]),
    Route("/ui/executions/{execution_id}", pages.execution_page, methods=["GET"]),
    Route("/ui/executions/{execution_id}/timeline", pages.timeline, methods=["GET"]),
    Route("/ui/artifacts/{artifact_id}", pages.artifact, methods=["GET"]),
    Route("/ui/static/{name}", pages.static, methods=["GET"]),
]
