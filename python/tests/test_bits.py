"""Trainer.fit computes what `stalepipe train --model-file` computes, bit for bit."""
import pytest
import torch

import stalepipe
from nets import SmallNet, assert_same_tensors, run_cli


@pytest.mark.parametrize("executor", ["emulated", "threads"])
def test_fit_equals_the_cli_on_the_same_scripted_module(tmp_path, executor):
    torch.manual_seed(0)
    script = torch.jit.script(SmallNet())
    script.save(str(tmp_path / "net.pt"))
    options = dict(data="synthetic:192", batch_size=32, epochs=2, lr=0.05, pipeline=[2], executor=executor, seed=5)
    trainer = stalepipe.Trainer(script, progress="none", **options)
    trainer.fit()
    flags = []
    for k, v in options.items():
        flags += [f"--{k.replace('_', '-')}", ",".join(map(str, v)) if isinstance(v, list) else str(v)]
    run_cli("train", "--model-file", str(tmp_path / "net.pt"), *flags, "--progress", "none",
            "--export", str(tmp_path / "cli.pt"))
    assert_same_tensors(trainer.state_dict(), torch.jit.load(str(tmp_path / "cli.pt")).state_dict())
