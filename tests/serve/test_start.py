"""``raygents.serve.start`` on an address it cannot have: a clear ``UserError``, and no Serve
left behind that would answer somewhere else."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from servekit import TOKEN, client, free_port

import raygents as rg
from raygents.testing import FunctionModel, text

pytestmark = pytest.mark.ray

AGENTS = [rg.Agent("echo", model=FunctionModel(lambda req: text("hi")))]


@pytest.fixture
def no_serve(ray_session: None) -> Iterator[None]:
    """Serve down before and after the test."""
    from ray import serve

    import raygents.serve as rgs

    serve.shutdown()
    yield
    rgs.stop()
    serve.shutdown()


def serve_is_up() -> bool:
    from ray import serve

    return bool(serve.status().proxies)


@pytest.mark.parametrize("taken_after_the_check", [False, True], ids=["in_use", "taken_late"])
def test_a_port_in_use_is_a_user_error_and_serve_is_left_down(
    no_serve: None, taken_after_the_check: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    import raygents.serve as rgs
    from raygents.serve import deployment

    if taken_after_the_check:  # (free when start looks, taken when Serve's proxy binds it)
        real, looked = deployment._cannot_listen, []

        def misses_it_once(host: str, port: int) -> str | None:
            looked.append(port)
            return None if len(looked) == 1 else real(host, port)

        monkeypatch.setattr(deployment, "_cannot_listen", misses_it_once)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(rg.UserError, match=f"cannot serve on 127.0.0.1:{port}: .*in use"):
            rgs.start(AGENTS, port=port, auth_token=TOKEN)
    assert not serve_is_up()
    if taken_after_the_check:
        assert looked == [port, port]  # (the second look, after Serve's proxy failed)

    url = rgs.start(AGENTS, port=free_port(), auth_token=TOKEN)  # (another port serves)
    with client(url, TOKEN) as http:
        answer = http.post("/v1/runs", json={"agent": "echo", "input": "x", "wait": True})
    assert answer.status_code == 201 and answer.json()["output"] == "hi", answer.text


def test_a_second_start_on_another_address_is_refused(no_serve: None) -> None:
    import raygents.serve as rgs

    first = free_port()
    url = rgs.start(AGENTS, port=first, auth_token=TOKEN)
    rgs.stop()  # (Serve stays up, on its first port)
    other = free_port()
    with pytest.raises(rg.UserError, match=f"already listens on 127.0.0.1:{first}"):
        rgs.start(AGENTS, port=other, auth_token=TOKEN)

    assert rgs.start(AGENTS, port=first, auth_token=TOKEN) == url  # (the same address: fine)
    with client(url, TOKEN) as http:
        assert http.get("/v1/runs").status_code == 200
