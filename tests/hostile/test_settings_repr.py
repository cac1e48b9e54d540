"""A namespace's ``Settings`` never show the checkpoint HMAC key: their ``repr`` and ``str``
(in a log line, an error, a debugger) say whether a key is set, and its id, never its bytes."""

from __future__ import annotations

import logging

import pytest

from raygents.records import codec
from raygents.runtime.link.settings import Settings

KEY = b"s3cr3t-hmac-key-0123456789abcdef"


def test_the_repr_and_str_of_settings_with_a_key_hide_it(caplog: pytest.LogCaptureFixture) -> None:
    settings = Settings(store="file:///tmp/store", key=KEY, retention_s=60.0)
    with caplog.at_level(logging.INFO, logger="raygents"):
        logging.getLogger("raygents").info("settings %s, %r", settings, settings)
    for shown in (repr(settings), str(settings), f"{settings}", caplog.text):
        assert "s3cr3t" not in shown and KEY.hex() not in shown, shown
        assert repr(KEY) not in shown and str(list(KEY)) not in shown
    assert f"key=<set, id {codec.key_id(KEY).hex()}>" in repr(settings)
    assert repr(settings).startswith("Settings(store='file:///tmp/store', durability='sync', ")
    assert "retention_s=60.0" in repr(settings)
    assert settings.key == KEY, "only what is shown changes"


def test_the_repr_of_settings_without_a_key_says_so() -> None:
    assert "key=None" in repr(Settings())
    assert Settings() == Settings() and Settings(key=KEY) != Settings()
