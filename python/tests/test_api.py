"""stalepipe.Trainer as a PyTorch user meets it: options, data, hooks, the trained network."""
import pytest
import torch

import stalepipe
from nets import SmallNet, tensor_data

QUICK = dict(batch_size=32, epochs=2, lr=0.05, progress="none", seed=3)


def test_every_option_is_a_keyword_named_as_its_flag_with_its_default_and_help():
    table = stalepipe.options()
    assert table["image_size"][0] == 0
    assert table["batch_size"][0] == 128
    assert table["pipeline"][0] == "none"
    assert "data set" in table["data"][1]
    assert "segment_steps" not in table  # no flag, no keyword
    assert "image_size" in stalepipe.Trainer.__doc__


def test_a_module_trains_on_a_data_spec_and_gives_back_its_weights():
    net = SmallNet()
    trainer = stalepipe.Trainer(net, data="synthetic:256", pipeline=[2], **QUICK)
    history = trainer.fit()
    assert [h["epoch"] for h in history] == [1, 2]
    assert history[-1]["step"] == 16
    assert {"train_loss", "test_loss", "test_accuracy", "images_per_second", "lr"} <= history[-1].keys()
    assert history[-1]["test_accuracy"] is not None
    before = {k: v.clone() for k, v in net.state_dict().items()}
    net.load_state_dict(trainer.state_dict())
    assert any(not torch.equal(before[k], v) for k, v in net.state_dict().items())
    assert isinstance(trainer.module(), torch.jit.ScriptModule)


def test_a_tensor_dataset_and_a_dataloader_train_with_a_test_set():
    data, test = tensor_data(256), tensor_data(64, seed=1)
    trainer = stalepipe.Trainer(SmallNet(), pipeline=[2], **QUICK)
    history = trainer.fit(data, test=test)
    assert history[-1]["step"] == 16 and history[-1]["test_accuracy"] is not None
    loader = torch.utils.data.DataLoader(data, batch_size=32, shuffle=True, num_workers=2)
    trainer = stalepipe.Trainer(SmallNet(), executor="emulated", **QUICK)
    history = trainer.fit(loader)
    assert history[-1]["step"] == 16 and history[-1]["test_accuracy"] is None


def test_the_dataset_is_read_in_the_same_order_for_the_same_seed():
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        trainer = stalepipe.Trainer(SmallNet(), pipeline=[2], **QUICK)
        trainer.fit(tensor_data(96))
        runs.append(trainer.state_dict())
    for k in runs[0]:
        assert torch.equal(runs[0][k], runs[1][k]), k


def test_hooks_see_every_step_epoch_and_evaluation(recwarn):
    steps, epochs, evals = [], [], []
    trainer = stalepipe.Trainer(SmallNet(), data="synthetic:128", pipeline=[2], eval_every=2, **QUICK)
    trainer.fit(on_step=lambda s: steps.append(s["step"]), on_epoch=lambda e: epochs.append(e["epoch"]),
                on_eval=lambda e: evals.append(e["step"]))
    assert steps == list(range(8))
    assert epochs == [1, 2]
    assert evals[-1] == 8 and len(evals) >= 2


def test_export_writes_the_trained_network():
    import tempfile, os
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trained.pt")
        trainer = stalepipe.Trainer(SmallNet(), data="synthetic:64", export=path, **QUICK)
        trainer.fit()
        loaded = torch.jit.load(path)
        for k, v in trainer.state_dict().items():
            assert torch.equal(loaded.state_dict()[k], v)


def test_a_run_directory_holds_the_network_and_its_files(tmp_path):
    out = tmp_path / "run"
    stalepipe.Trainer(SmallNet(), data="synthetic:64", out=out, **QUICK).fit()
    for name in ("model.pt", "config.json", "metrics.jsonl", "summary.json"):
        assert (out / name).exists(), name
