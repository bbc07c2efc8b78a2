"""Developer tools behind the command line: `gpu-check` and `profile-inference`.

`cli.py` imports each tool only when its command runs (the tools import torch,
matplotlib and rich), so the command line starts fast; nothing here is
imported by the trainer side or the server.
"""
