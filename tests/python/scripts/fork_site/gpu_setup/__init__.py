"""An installed in-house helper package that picks the GPU and initialises it
when it is imported, as some team libraries do. tests/cli/test_accept_cmd_fork.sh
puts this folder on PYTHONPATH: devgate's fork server imports the package with
the program's other installed imports, finds the device initialised, and starts
every run in a fresh interpreter instead. On a machine without CUDA it stands
in by leaving torch.cuda as torch.cuda.init() leaves it (initialised), the
state the server checks."""
import torch

if torch.cuda.is_available():
    torch.cuda.init()
    DEVICE = torch.device("cuda", torch.cuda.current_device())
else:
    torch.cuda._initialized = True  # the stand-in for a machine without CUDA
    DEVICE = torch.device("cpu")
