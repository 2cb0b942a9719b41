"""Links the built extension into <dir>/ (the build tree's torch_fl package dir), records the
torch version it was built against, and writes a stamp file.
Usage: link_extension.py EXTENSION DIR STAMP TORCH_VERSION"""
import os
import sys

ext, target_dir, stamp, torch_version = sys.argv[1:5]
os.makedirs(target_dir, exist_ok=True)
dst = os.path.join(target_dir, os.path.basename(ext))
if os.path.lexists(dst):
    os.remove(dst)
os.symlink(os.path.abspath(ext), dst)
with open(os.path.join(target_dir, "_torch_version.txt"), "w") as f:
    f.write(torch_version + "\n")
with open(stamp, "w") as f:
    f.write(dst + "\n")
