"""``start_batch(output=...)`` naming something that is not a usable directory is the caller's
error, named as such (a ``UserError`` with the path), never a raw OS error."""

from __future__ import annotations

from pathlib import Path

import pytest

import raygents as rg

AGENT = rg.Agent("batch-output-path")


@pytest.mark.parametrize("where", ["file", "under-a-file"])
def test_an_output_that_is_not_a_directory_is_a_user_error(tmp_path: Path, where: str) -> None:
    file = tmp_path / "results.jsonl"
    file.write_text("not a directory")
    output = file if where == "file" else file / "out"
    with pytest.raises(rg.UserError, match="output") as caught:
        rg.start_batch(AGENT, ["x"], job_id="j", output=str(output), progress=False)
    assert str(output) in str(caught.value)
    assert file.read_text() == "not a directory"
