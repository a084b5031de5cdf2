from __future__ import annotations

from pathlib import Path

from starlette.testclient import TestClient

from gateway.server.app import create_app
from gateway.settings import Settings
from tests.server.helpers import auth


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


def _definitions(client: TestClient, fmt: str) -> dict:  # type: ignore[type-arg]
    response = client.get(f"/v1/tools?format={fmt}", headers=auth())
    assert response.status_code == 200, response.text
    listing = response.json()
    assert listing["format"] == fmt and listing["count"] == len(listing["items"])
    return listing  # type: ignore[no-any-return]


def test_every_enabled_tool_as_llm_definitions_in_one_request(client: TestClient) -> None:
    listing = _definitions(client, "llm")
    detail = client.get("/v1/tools/fs.write_file", headers=auth()).json()
    items = {item["name"]: item for item in listing["items"]}
    assert items["fs__write_file"] == detail["llm_tool"]  # the same as one tool's llm_tool
    tools = client.get("/v1/tools", headers=auth()).json()["items"]
    enabled = {t["name"] for t in tools if not all(v["disabled"] for v in t["versions"])}
    assert set(listing["names"].values()) == enabled
    assert listing["names"]["fs__write_file"] == "fs.write_file"
    assert sorted(listing["names"]) == sorted(items)


def test_tool_definitions_in_the_shapes_frameworks_take(client: TestClient) -> None:
    openai = {i["function"]["name"]: i for i in _definitions(client, "openai")["items"]}
    write = openai["fs__write_file"]
    assert write["type"] == "function"
    assert set(write["function"]) == {"name", "description", "parameters"}
    assert write["function"]["parameters"]["required"] == ["content", "path"]
    anthropic = {i["name"]: i for i in _definitions(client, "anthropic")["items"]}
    assert set(anthropic["fs__write_file"]) == {"name", "description", "input_schema"}
    assert anthropic["fs__write_file"]["input_schema"] == write["function"]["parameters"]
    mcp = _definitions(client, "mcp")
    by_name = {i["name"]: i for i in mcp["items"]}
    assert set(by_name["fs.write_file"]) == {"name", "description", "inputSchema"}
    assert mcp["names"]["fs.write_file"] == "fs.write_file"
    for item in [*anthropic.values(), *by_name.values()]:
        schema = item.get("input_schema") or item["inputSchema"]
        assert "x-" not in str(list(_keys(schema)))


def _keys(value: object) -> list[str]:
    if isinstance(value, dict):
        return [k for k, v in value.items() for k in (k, *_keys(v))]
    if isinstance(value, list):
        return [k for v in value for k in _keys(v)]
    return []


def test_disabled_tools_are_not_offered_to_a_model(settings: Settings, project: Path) -> None:
    (project / "tools.d" / "fs.write_file.yaml").unlink()
    old = project / "tools.d" / "fs.write_file.v1.0.yaml"
    old.write_text(old.read_text() + "disabled: true\n")
    with TestClient(create_app(settings)) as client:
        listed = [t["name"] for t in client.get("/v1/tools", headers=auth()).json()["items"]]
        offered = _definitions(client, "openai")["names"].values()
        detail = client.get("/v1/tools/fs.write_file", headers=auth())
    # no call could use it: no listing offers it (`toolgate tools` shows the whole catalogue)
    assert "fs.write_file" not in listed and "fs.read_file" in listed
    assert "fs.write_file" not in offered and "fs.read_file" in offered
    assert detail.status_code == 404, detail.text


def test_a_tool_under_a_standing_refusal_is_in_no_listing(client: TestClient) -> None:
    # bob (an approver) is refused high-risk tools by a standing rule: MCP tools/list hides
    # them, and so must every format of GET /v1/tools and the tool's own page
    bob = auth("tg_dev_bob")
    listed = {t["name"] for t in client.get("/v1/tools", headers=bob).json()["items"]}
    assert "fs.read_file" in listed and "proc.python" not in listed
    for fmt in ("llm", "openai", "anthropic", "mcp"):
        body = client.get(f"/v1/tools?format={fmt}", headers=bob).json()
        assert "proc.python" not in body["names"].values(), fmt
        assert "fs.read_file" in body["names"].values(), fmt
    assert client.get("/v1/tools/proc.python", headers=bob).status_code == 404
    assert client.get("/v1/tools/proc.python", headers=auth()).status_code == 200


def test_a_listing_is_for_the_workspace_it_names(client: TestClient) -> None:
    # alice is no member of `ops`: no call of hers could run there, so nothing is listed
    ops = client.get("/v1/tools?workspace=ops", headers=auth()).json()
    assert ops == {"items": [], "count": 0}
    assert client.get("/v1/tools?workspace=demo", headers=auth()).json()["count"] > 10


def test_an_unknown_format_is_400(client: TestClient) -> None:
    response = client.get("/v1/tools?format=gpt", headers=auth())
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["code"] == "invalid_format"
    assert "llm, openai, anthropic, mcp" in problem["detail"] and "'gpt'" in problem["detail"]


def test_openapi_documents_the_format_and_after_parameters(client: TestClient) -> None:
    doc = client.get("/openapi.json", headers=auth()).json()
    tools = doc["paths"]["/v1/tools"]["get"]
    fmt = next(p for p in tools["parameters"] if p["name"] == "format")
    assert fmt["schema"]["enum"] == ["llm", "openai", "anthropic", "mcp"]
    assert "400" in tools["responses"]
    events = doc["paths"]["/v1/executions/{execution_id}/events"]["get"]
    assert any(p.get("name") == "after" for p in events["parameters"])  # others: $ref
    assert "400" in events["responses"]
