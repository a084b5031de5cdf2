from __future__ import annotations

from starlette.testclient import TestClient

from tests.server.conftest import auth


def test_list_tools(client: TestClient) -> None:
    items = client.get("/v1/tools", headers=auth()).json()["items"]
    names = [t["name"] for t in items]
    for expected in (
        "fs.read_file",
        "fs.list_dir",
        "fs.write_file",
        "fs.apply_patch",
        "fs.delete_file",
    ):
        assert expected in names
    write = next(t for t in items if t["name"] == "fs.write_file")
    assert write["version"] == "1.2.0"
    assert [v["version"] for v in write["versions"]] == ["1.2.0", "1.0.0"]


def test_tool_detail_has_json_schema(client: TestClient) -> None:
    tool = client.get("/v1/tools/fs.write_file", headers=auth()).json()
    schema = tool["input_schema"]
    assert schema["type"] == "object"
    assert schema["required"] == ["content", "path"]
    assert schema["properties"]["path"]["type"] == "string"
    assert tool["llm_tool"]["name"] == "fs__write_file"
    old = client.get("/v1/tools/fs.write_file?version=1.0.0", headers=auth()).json()
    assert old["version"] == "1.0.0"
    assert old["deprecated"]


def test_unknown_tool_is_404(client: TestClient) -> None:
    response = client.get("/v1/tools/nope", headers=auth())
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"
    assert client.get("/v1/tools/fs.write_file?version=9", headers=auth()).status_code == 404


def test_openapi_lists_the_routes(client: TestClient) -> None:
    doc = client.get("/openapi.json", headers=auth()).json()
    assert doc["openapi"].startswith("3.1")
    for path in ("/v1/executions", "/v1/executions/{execution_id}", "/v1/tools/{name}", "/healthz"):
        assert path in doc["paths"]
    assert "ExecutionRequest" in doc["components"]["schemas"]


def test_openapi_covers_every_route(client: TestClient) -> None:
    from starlette.routing import Route

    doc = client.get("/openapi.json", headers=auth()).json()
    for route in client.app.routes:  # type: ignore[attr-defined]
        if isinstance(route, Route) and route.path.startswith(("/v1", "/healthz", "/readyz")):
            methods = {m.lower() for m in route.methods or ()} - {"head"}
            assert route.path in doc["paths"], route.path
            assert methods <= set(doc["paths"][route.path]), (route.path, methods)
