"""CORS: off unless the app names the origins whose pages may call it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from starlette.testclient import TestClient

import raygents as rg
from raygents.serve.api import build_api
from raygents.serve.settings import ServeSettings, settings

TOKEN = "x" * 24
APP = "https://app.example.com"


def client(origins: tuple[str, ...]) -> TestClient:
    built = ServeSettings(
        agents={"a": rg.Agent("a")},
        auth_token=TOKEN,
        webhook_secret=None,
        namespace="raygents",
        store=None,
        cors_origins=origins,
    )
    return TestClient(build_api(SimpleNamespace(settings=built)))  # type: ignore[arg-type]


def preflight(api: TestClient, origin: str) -> dict[str, str]:
    headers = {
        "Origin": origin,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type",
    }
    return dict(api.options("/v1/runs", headers=headers).headers)


def test_no_origin_gets_cors_headers_by_default() -> None:
    api = client(())
    assert "access-control-allow-origin" not in preflight(api, APP)
    assert "access-control-allow-origin" not in api.get("/healthz", headers={"Origin": APP}).headers


def test_a_named_origin_may_call_the_api_and_others_may_not() -> None:
    api = client((APP,))
    allowed = preflight(api, APP)
    assert allowed["access-control-allow-origin"] == APP
    assert "authorization" in allowed["access-control-allow-headers"].lower()
    assert "access-control-allow-credentials" not in allowed  # (the token is a header)
    answer = api.get("/healthz", headers={"Origin": APP})
    assert answer.headers["access-control-allow-origin"] == APP
    assert "access-control-allow-origin" not in preflight(api, "https://evil.example.com")
    refused = api.get("/v1/runs", headers={"Origin": APP})  # (CORS is not auth)
    assert refused.status_code == 401


@pytest.mark.parametrize(
    "origins", [["*"], ["https://a.example.com/path"], ["null"], "https://a.example.com", [3]]
)
def test_origins_are_checked(origins: object) -> None:
    with pytest.raises(rg.UserError, match="cors_origins"):
        settings(
            rg.Agent("a"),
            auth_token=TOKEN,
            webhook_secret=None,
            route_prefix="/",
            cors_origins=origins,  # type: ignore[arg-type]
        )
