"""Parameter-list parsing shared by the ABI check (LLVM IR) and Triton-cache import (Triton IR)."""

from karchive.producer.compile._irtext import enclosed, split_top_level
from karchive.producer.compile.describe import llvm_entry_param_sizes


def test_enclosed_respects_nesting_and_quotes():
    text = 'f(ptr addrspace(1) %0, i32 %1, "a)b" %2) #0 {'
    assert enclosed(text, 2) == 'ptr addrspace(1) %0, i32 %1, "a)b" %2'
    assert enclosed("f(a, (b", 2) is None
    assert enclosed("f(a]", 2) is None


def test_split_top_level():
    assert split_top_level('%a: !tt.ptr<f32, 1> loc("x, y"), %b: i32 {tt.divisibility = 16 : i32}') == [
        '%a: !tt.ptr<f32, 1> loc("x, y")',
        " %b: i32 {tt.divisibility = 16 : i32}",
    ]
    assert split_top_level("") == []


def test_llvm_entry_sizes():
    llir = (
        "define amdgpu_kernel void @k(ptr addrspace(1) inreg %0, half inreg %1, i1 %2, i64 %3) local_unnamed_addr #0 {"
    )
    assert llvm_entry_param_sizes(llir, "k") == [8, 2, 1, 8]
    assert llvm_entry_param_sizes(llir, "other") is None
    assert llvm_entry_param_sizes("define void @k(<4 x float> %v)", "k") is None
