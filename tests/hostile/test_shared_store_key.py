"""A shared store is signed by default: ``s3://``, and a ``file://`` directory its operator
marked shared, refuse to work without the checkpoint key (``init``, the ``raygents`` command,
sessions), with an error that says how to make one and how to opt out for a throwaway setup;
a local ``file://`` store stays key-free."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

import raygents as rg
from raygents.cli.main import main
from raygents.core.messages import Message
from raygents.records import storekey
from raygents.runtime.driver import client, startup
from raygents.sessions.store import StoreSession


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No key, no opt-out (the suite's own moto stores opt out: see ``conftest.py``)."""
    for name in (storekey.KEY_ENV, storekey.UNSIGNED_OK_ENV, "RAYGENTS_REQUIRE_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(startup, "_warned_unkeyed", False)
    return monkeypatch


def _marked(tmp_path: Path) -> str:
    root = tmp_path / "shared"
    root.mkdir()
    (root / storekey.SHARED_MARK).touch()
    return f"file://{root}"


def _says_how(message: str) -> None:
    assert "secrets.token_hex(32)" in message and storekey.KEY_ENV in message
    assert f"{storekey.UNSIGNED_OK_ENV}=1" in message


def test_a_shared_store_without_a_key_is_refused(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for url in ("s3://bucket/prefix", _marked(tmp_path)):
        with pytest.raises(rg.UserError) as info:
            startup.checkpoint_key(url)
        _says_how(str(info.value))
        assert "shared" in str(info.value)


def test_a_local_store_stays_key_free(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert startup.checkpoint_key(f"file://{tmp_path}") is None
    assert startup.checkpoint_key("memory://") is None


def test_init_refuses_before_ray_starts(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def no_ray(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("Ray was started before the store's key was checked")

    env.setattr(client.ray, "init", no_ray)
    with pytest.raises(rg.UserError, match="shared"):
        rg.init(store=_marked(tmp_path))


def test_opting_out_explicitly_runs_without_a_key_and_warns(
    env: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    env.setenv(storekey.UNSIGNED_OK_ENV, "1")
    with caplog.at_level(logging.WARNING, logger="raygents"):
        assert startup.checkpoint_key("s3://bucket/prefix") is None
    (warning,) = caplog.records
    assert "forge" in warning.getMessage() and storekey.KEY_ENV in warning.getMessage()


def test_with_a_key_a_shared_store_works(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    env.setenv(storekey.KEY_ENV, "k" * 32)
    assert startup.checkpoint_key(_marked(tmp_path)) == b"k" * 32


def test_the_command_refuses_a_shared_store_without_a_key(
    env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["runs", "--store", _marked(tmp_path)]) == 1
    _says_how(capsys.readouterr().err)


def test_a_session_in_a_shared_store_needs_the_key(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    session = StoreSession(_marked(tmp_path))
    with pytest.raises(rg.UserError, match="shared"):
        session.save("s1", [Message(role="user", content="hi")])
    env.setenv(storekey.KEY_ENV, "k" * 32)
    session.save("s1", [Message(role="user", content="hi")])
    assert [m.content for m in session.load("s1")] == ["hi"]
