"""benchmarks.compile_cost: each setting in a fresh process with an empty compile cache, timed on the first
real batches of distinct shapes."""

import pytest

from benchmarks.compile_cost import main

MICRO = [
    "data=toy",
    "model.d_model=16",
    "model.num_heads=2",
    "model.encoder_layers=1",
    "model.decoder_layers=1",
    "model.ffn_dim=16",
    "trainer.precision=32-true",
    "threads=1",
]


def test_each_setting_is_timed_on_batches_of_distinct_shapes_in_a_process_of_its_own(capsys):
    import os
    import tempfile

    (result,) = main(["--settings", "false", "--shapes", "3", "--timed", "2", *MICRO])
    cache = result["compile_cache"]  # the child's compile cache: a fresh temporary folder, not this process's
    assert cache and cache != os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    assert os.path.dirname(cache) == tempfile.gettempdir() and not os.path.exists(cache)  # removed after
    assert result["compile"] == "false" and result["new_shapes"] == 2  # the first shape, then two new ones
    assert result["first_update_s"] >= 0 and result["new_shapes_s"] >= 0 and result["ms_per_update"] > 0
    assert result["overrides"] == MICRO and result["threads"] == 1  # the child ran the recipe it was given
    assert capsys.readouterr().out.strip().endswith("}")  # one JSON line per setting


def test_an_unknown_setting_is_refused_listing_the_valid_ones(capsys):
    with pytest.raises(SystemExit):
        main(["--settings", "true,sometimes"])
    assert "sometimes unknown; choose among false, true, layers" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--timed", "0"], "--timed 0: at least 1"),  # a ZeroDivisionError after the compile
        (["--shapes", "0"], "--shapes 0: at least 1"),  # read as every shape
    ],
)
def test_bad_options_are_said_before_the_compile(capsys, argv, said):
    with pytest.raises(SystemExit):
        main(argv)
    assert said in capsys.readouterr().err
