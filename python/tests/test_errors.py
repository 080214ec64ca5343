"""Every bad input is a Python exception with one line; the interpreter never crashes."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

import stalepipe
from nets import SmallNet, tensor_data

QUICK = dict(batch_size=32, epochs=1, progress="none")


def one_line(excinfo):
    text = str(excinfo.value)
    assert "\n" not in text, text
    return text


class Unscriptable(nn.Module):
    def forward(self, x):
        return x.numpy()  # not TorchScript


def test_a_module_that_cannot_be_scripted_is_named():
    with pytest.raises(ValueError) as e:
        stalepipe.Trainer(Unscriptable())
    assert one_line(e).startswith("Unscriptable cannot be scripted")


def test_an_unknown_keyword_names_the_closest_options():
    with pytest.raises(TypeError) as e:
        stalepipe.Trainer(SmallNet(), image_sise=64)
    assert "image_sise" in one_line(e) and "image_size" in one_line(e)


@pytest.mark.parametrize("keyword,value", [("batch_size", "32"), ("augment", 1), ("lr", "fast"), ("pipeline", 2.5)])
def test_a_value_of_the_wrong_type_is_a_type_error(keyword, value):
    with pytest.raises(TypeError) as e:
        stalepipe.Trainer(SmallNet(), **{keyword: value})
    assert one_line(e).startswith(f"{keyword}: expects")


def test_a_bad_value_is_a_value_error_naming_the_keyword():
    with pytest.raises(ValueError) as e:
        stalepipe.Trainer(SmallNet(), data="synthetic:64", batch_size=0, **{k: v for k, v in QUICK.items() if k != "batch_size"}).fit()
    assert "batch_size" in one_line(e) and "DataOptions" not in one_line(e)
    with pytest.raises(ValueError) as e:
        stalepipe.Trainer(SmallNet(), data="synthetic:64", pipeline=[99], **QUICK).fit()
    assert one_line(e).startswith("pipeline")


def test_the_processes_executor_points_to_launch():
    with pytest.raises(ValueError) as e:
        stalepipe.Trainer(SmallNet(), executor="processes")
    assert "stalepipe launch" in one_line(e)


class Pairs(torch.utils.data.Dataset):
    def __init__(self, item):
        self.item = item

    def __len__(self):
        return 64

    def __getitem__(self, i):
        return self.item(i)


def test_a_dataset_whose_items_are_not_pairs_is_refused():
    bad = Pairs(lambda i: (torch.zeros(1, 32, 32), 1) if i == 0 else torch.zeros(1, 32, 32))
    with pytest.raises(stalepipe.Error) as e:
        stalepipe.Trainer(SmallNet(), **QUICK).fit(bad)
    assert "Pairs item" in one_line(e) and "expected a pair (x, y)" in one_line(e)


def test_a_dataset_that_raises_raises_its_own_exception_with_the_item():
    def item(i):
        if i == 40:
            raise KeyError("no sample 40")
        return torch.zeros(1, 32, 32), i % 10
    with pytest.raises(KeyError, match="no sample 40") as e:
        stalepipe.Trainer(SmallNet(), executor="emulated", **QUICK).fit(Pairs(item))
    assert any("Pairs item 40" in note for note in getattr(e.value, "__notes__", []))


def test_a_dataloader_that_raises_raises_its_exception_with_the_batch_index():
    def batches():
        for i in range(3):
            yield torch.zeros(8, 1, 32, 32), torch.zeros(8, dtype=torch.long)
        raise ValueError("the disk went away")

    class Loader:
        def __iter__(self):
            return batches()
    with pytest.raises(ValueError, match="the disk went away") as e:
        stalepipe.Trainer(SmallNet(), lr_schedule="constant", **QUICK).fit(Loader())
    assert any("Loader batch 3" in note for note in e.value.__notes__)


def test_a_hook_that_raises_stops_the_run_with_its_exception():
    def on_step(step):
        if step["step"] == 2:
            raise ZeroDivisionError("hook")
    with pytest.raises(ZeroDivisionError, match="hook"):
        stalepipe.Trainer(SmallNet(), data="synthetic:128", pipeline=[2], **QUICK).fit(on_step=on_step)


def test_data_that_is_not_data_is_a_type_error():
    with pytest.raises(TypeError) as e:
        stalepipe.Trainer(SmallNet(), **QUICK).fit(42)
    assert one_line(e).startswith("fit(data): expects")


def test_resume_of_a_directory_that_is_not_a_run():
    with pytest.raises(ValueError) as e:
        stalepipe.Trainer(resume="/nonexistent")
    assert "not a stalepipe run directory" in one_line(e)


def test_another_torch_than_the_one_built_against_is_named_at_import(tmp_path):
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text("__version__ = '9.9.0'\n")
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    done = subprocess.run([sys.executable, "-c", "import stalepipe"], env=env, capture_output=True, text=True)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: stalepipe was built against LibTorch") and "9.9.0" in last
