"""Prints what the meson build needs from the installed torch, one item per line:
version, include dirs (';'-separated), library dir, the C++11 ABI flag (0/1)."""
import os

os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"  # never autoload torch_fl while building it

import torch
from torch.utils import cpp_extension

print(torch.__version__)
print(";".join(cpp_extension.include_paths()))
print(os.path.join(os.path.dirname(torch.__file__), "lib"))
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
