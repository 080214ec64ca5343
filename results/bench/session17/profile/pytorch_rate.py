# PyTorch's plain channels_last training at one thread: images/s over 10 steps after 3, the
# counterpart of `op_profile MODEL FILE untimed` (one_core_ab.sh alternates the two).
import os, sys, torch
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../../../bench"))
import peers
torch.set_num_threads(1)
step, data = peers.plain_step(sys.argv[1], 1, peers.batches(128, 1), channels_last=True)
print(f"{peers.train_rate(step, data, 3, 10):.1f} images/s over 10 steps")
