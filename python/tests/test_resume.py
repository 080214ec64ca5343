"""Ctrl-C stops cleanly with the checkpoint intact, and resume= continues exactly."""
import os
import signal
import subprocess
import sys
import textwrap

import torch

import stalepipe
from nets import SmallNet, assert_same_tensors, tensor_data

# A stop falls on a drain point (a multiple of checkpoint_every), so that the resumed run is the
# uninterrupted one bit for bit; a Ctrl-C anywhere is, where the run is not pipelined.
OPTIONS = dict(data="synthetic:256", batch_size=32, epochs=2, lr=0.05, pipeline=[2], progress="none",
               checkpoint_every=3, seed=7)
UNPIPELINED = {k: v for k, v in OPTIONS.items() if k != "pipeline"}


def straight(options):
    torch.manual_seed(0)
    trainer = stalepipe.Trainer(SmallNet(), **options)
    trainer.fit()
    return trainer.state_dict()


def test_a_stopped_run_resumes_to_the_weights_of_an_uninterrupted_one(tmp_path):
    torch.manual_seed(0)
    out = tmp_path / "run"
    trainer = stalepipe.Trainer(SmallNet(), out=out, stop_at_step=9, **OPTIONS)
    history = trainer.fit()
    assert [h["epoch"] for h in history] == [1] and trainer.history == history
    resumed = stalepipe.Trainer(resume=out)
    resumed.fit()
    assert [h["epoch"] for h in resumed.history] == [1, 2]
    assert_same_tensors(resumed.state_dict(), straight(OPTIONS))


def test_a_run_on_a_dataset_resumes_with_the_same_dataset(tmp_path):
    options = {k: v for k, v in OPTIONS.items() if k != "data"}
    torch.manual_seed(0)
    whole = stalepipe.Trainer(SmallNet(), **options)
    whole.fit(tensor_data(256))
    torch.manual_seed(0)
    out = tmp_path / "run"
    stalepipe.Trainer(SmallNet(), out=out, stop_at_step=9, **options).fit(tensor_data(256))
    try:
        stalepipe.Trainer(resume=out).fit()
        raise AssertionError("resumed without its data")
    except ValueError as e:
        assert "data held by the program" in str(e)
    resumed = stalepipe.Trainer(resume=out)
    resumed.fit(tensor_data(256))
    assert_same_tensors(resumed.state_dict(), whole.state_dict())


SCRIPT = textwrap.dedent("""
    import os, signal, sys, torch, stalepipe
    sys.path.insert(0, {tests!r})
    from nets import SmallNet
    torch.manual_seed(0)
    options = {options!r}
    trainer = stalepipe.Trainer(SmallNet(), out={out!r}, **options)
    def on_step(s):
        if s["step"] == 5:
            os.kill(os.getpid(), signal.SIGINT)  # as Ctrl-C in the terminal
    try:
        trainer.fit(on_step=on_step)
    except KeyboardInterrupt:
        print("KeyboardInterrupt", flush=True)
        sys.exit(130)
""")


def test_ctrl_c_raises_keyboard_interrupt_after_a_clean_stop_and_the_run_resumes(tmp_path):
    out = str(tmp_path / "run")
    script = SCRIPT.format(tests=os.path.dirname(__file__), options=UNPIPELINED, out=out)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 130, done.stderr
    assert done.stdout.strip() == "KeyboardInterrupt"
    assert os.path.isdir(os.path.join(out, "checkpoint"))
    resumed = stalepipe.Trainer(resume=out)
    resumed.fit()
    assert_same_tensors(resumed.state_dict(), straight(UNPIPELINED))
