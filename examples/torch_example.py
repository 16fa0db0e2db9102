"""An archived Triton kernel as a torch custom op: eager, torch.compile(fullgraph=True), CUDA graphs.

python examples/torch_example.py [examples.karc]     # karchive build examples/build.toml -o examples.karc
"""

import os
import sys


def skip(why: str) -> None:
    print(f"skipped: {why}")
    sys.exit(0)


ARCHIVE = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "examples.karc")

try:
    import torch
except ImportError:
    skip("torch is not installed")
if not torch.cuda.is_available():
    skip("no CUDA GPU visible to torch")
if not os.path.exists(ARCHIVE):
    skip(f"no archive at {ARCHIVE} (karchive build examples/build.toml -o examples.karc)")

import karchive
import karchive.interop.torch as kt

arc = karchive.open(ARCHIVE)
add = kt.custom_op(
    "karchive_examples::add",
    arc.kernel("add_kernel"),
    out="out_ptr",  # allocated by the op, shaped like x_ptr, returned
    grid=lambda m: ((m["n_elements"] + m["BLOCK"] - 1) // m["BLOCK"],),
    constexprs={"BLOCK": 1024},
)

x = torch.randn(1 << 20, device="cuda")
y = torch.randn_like(x)
assert torch.equal(add(x, y, x.numel()), x + y)  # eager, on torch's current stream

f = torch.compile(lambda a, b: add(a, b, a.numel()).relu(), fullgraph=True)
assert torch.allclose(f(x, y), (x + y).relu())  # one graph, no breaks

g = torch.cuda.CUDAGraph()
add(x, y, x.numel())  # launch once before capturing
with torch.cuda.graph(g):
    z = add(x, y, x.numel())
y.add_(1.0)
g.replay()
torch.cuda.synchronize()
assert torch.equal(z, x + y)
print("torch example OK: eager, torch.compile(fullgraph=True), CUDA graph replay")
