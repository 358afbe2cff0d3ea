"""An output folder's files of the user's are never overwritten, even when named like the command's own."""
import json

import pytest

from istar_plugin.errors import RunDirError
from istar_plugin.storage.owned_output import OwnedOutput
from istar_plugin.storage.ownership import ANALYSIS_MARKER


def test_a_users_file_named_like_an_output_is_refused_and_left_as_it_was(tmp_path):
    out = tmp_path / "out"
    with OwnedOutput(out, ANALYSIS_MARKER) as folder:  # an earlier istar-analyze, before summary.md existed
        folder.replace([out / "figure4.png"])
        (out / "figure4.png").write_text("ours")
        folder.finish()
    (out / "summary.md").write_text("the user's")
    marker_before = (out / ANALYSIS_MARKER).read_text()
    with OwnedOutput(out, ANALYSIS_MARKER) as folder:
        with pytest.raises(RunDirError, match=r"--out .*: summary.md is not a file this command wrote; move it or "
                                              r"choose another --out, nothing was changed"):
            folder.replace([out / "figure4.png", out / "summary.md"])
    assert (out / "summary.md").read_text() == "the user's" and (out / "figure4.png").read_text() == "ours"
    assert (out / ANALYSIS_MARKER).read_text() == marker_before
    with OwnedOutput(out, ANALYSIS_MARKER) as folder:  # its own earlier files are replaced as before
        assert folder.replace([out / "figure4.png"]) == [out / "figure4.png"]
    assert json.loads((out / ANALYSIS_MARKER).read_text())["files"] == ["figure4.png"]
