"""The examples under examples/python run as their docstrings say (on smaller settings)."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def run(*args, cwd=ROOT):
    done = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_custom_skips_trains_from_a_dataloader_and_gives_the_module_its_weights():
    out = run(os.path.join(ROOT, "examples/python/custom_skips.py"), "--epochs", "1", "--samples", "512")
    assert "test accuracy" in out and "the trained nn.Module itself: accuracy" in out


def test_torchvision_folder_trains_resnet18_on_photos_and_resumes(tmp_path):
    pytest.importorskip("torchvision")
    pytest.importorskip("PIL")
    photos = tmp_path / "photos"
    run(os.path.join(ROOT, "bench/make_photos.py"), str(photos), "3", "12", "80", "72")
    script = os.path.join(ROOT, "examples/python/torchvision_folder.py")
    out = run(script, str(photos), "--epochs", "1", "--out", str(tmp_path / "run"))
    assert "epoch 1: test accuracy" in out
    assert (tmp_path / "run" / "resnet18.pth").exists()
