def test_epoch_checkpoints_are_ordered_by_their_epoch_past_three_digits(tmp_path):
    """Sorted by name, epoch1000.ckpt came before epoch999.ckpt: average_last took the wrong files."""
    from nmt.inference.checkpoint import epoch_checkpoints

    for epoch in (998, 999, 1000, 1001):
        (tmp_path / f"epoch{epoch:03d}.ckpt").write_bytes(b"")
    assert [p.name for p in epoch_checkpoints(tmp_path)] == [
        "epoch998.ckpt", "epoch999.ckpt", "epoch1000.ckpt", "epoch1001.ckpt"
    ]  # fmt: skip
