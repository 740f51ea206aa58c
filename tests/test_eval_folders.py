"""Where an evaluation writes (nmt.tasks.eval_folders): nothing made under other settings replaced unsaid."""

import json

import pytest

from nmt.tasks.eval_folders import evaluation_folder, settings_differences
from nmt.utils import code


def identity(update: int, beam: int = 5) -> dict:
    return {
        "checkpoints": ["/runs/a/checkpoints/best.ckpt"],
        "weights": [{"update": update, "crc32": 7 * update}],
        "split": "test",
        "search": {"strategy": "beam", "beam_size": beam},
        "text": "0123456789abcdef",
    }


def made(folder, record: dict) -> None:
    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text(json.dumps({**record, "code": code.code_hash(), "bleu": 1.0}))


def test_a_runs_own_folder_of_other_weights_is_replaced_and_said(tmp_path, capsys):
    """A run continued since (best.ckpt of update 300 where update 200's was scored): the name is the same,
    the weights are not; the evaluation of the current weights replaces it, with a note naming the updates."""
    folder = tmp_path / "eval" / "test_beam5"
    made(folder, identity(200))
    assert evaluation_folder(folder, False, tmp_path, identity(300)) == (folder, code.code_hash())
    assert "held an evaluation of the same name made under other settings (weights: updates 200 -> updates 300)" in (
        capsys.readouterr().out
    )


def test_a_chosen_folder_refuses_other_settings_but_takes_the_same_ones_or_other_code(tmp_path, capsys, monkeypatch):
    folder = tmp_path / "out"
    made(folder, identity(200))
    with pytest.raises(ValueError, match=r"\(weights: updates 200 -> updates 300; search.beam_size: 5 -> 2\)"):
        evaluation_folder(folder, True, tmp_path, identity(300, beam=2))
    assert evaluation_folder(folder, True, tmp_path, identity(200))[0] == folder  # the same: scored again in place
    assert capsys.readouterr().out == ""
    monkeypatch.setattr(code, "code_hash", lambda: "f" * 16)  # as after an edit of nmt/: the same settings
    assert evaluation_folder(folder, True, tmp_path, identity(200))[0] == folder
    assert "(code: " in capsys.readouterr().out


def test_a_key_an_older_record_lacks_is_not_compared():
    old = {k: v for k, v in identity(200).items() if k != "weights"}  # made before weights were recorded
    assert settings_differences(old, identity(300)) == []
    # a search option added since (decode.epsilon): an older record's search lacks it, and is not refused for it
    newer = {**identity(200), "search": {**identity(200)["search"], "epsilon": 0.0}}
    assert settings_differences(identity(200), newer) == []
    # a run folder moved or copied: the same weights (checksums equal) at another path are the same checkpoints
    moved = {**identity(200), "checkpoints": ["/elsewhere/checkpoints/best.ckpt"]}
    assert settings_differences(moved, identity(200)) == []
    unchecked = [{"update": 200, "crc32": None}]  # weights written before their checksum: the paths decide
    assert settings_differences({**moved, "weights": unchecked}, {**identity(200), "weights": unchecked}) == [
        "checkpoints: ['/elsewhere/checkpoints/best.ckpt'] -> ['/runs/a/checkpoints/best.ckpt']"
    ]
