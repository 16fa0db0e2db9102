"""Attribution of compiles on threads other than the capturing one (karchive/producer/capture/_scope.py).

Real Triton compiles for a forced cuda:90 target (fake driver, tests/capture_fakes.py), driven from plain
threads, ``concurrent.futures`` pools and Triton's async compile mode. PyTorch's autograd engine (backward on
device threads) needs a GPU; here a TEST DOUBLE of ``torch.autograd`` runs "backward" on an engine thread of
its own, so the wrapper karchive installs is exercised; tests/gpu/test_capture_training.py proves it on the
real engine.
"""

from __future__ import annotations

import sys
import threading
import types
import warnings
from concurrent.futures import Executor, Future, ThreadPoolExecutor

import pytest
from support import needs_triton

pytestmark = needs_triton


@pytest.fixture
def gpu(triton_cache_dir, fake_gpu_driver):
    return fake_gpu_driver


def _compile(block: int, n: int = 1000) -> None:
    from capture_fakes import ONE_COMPILE_AT_A_TIME, ptr, scale_rows

    with ONE_COMPILE_AT_A_TIME:
        scale_rows[(1,)](ptr(), ptr(), n, 2.0, BLOCK=block)


def _incomplete() -> type[Warning]:
    """The warning a capture gives when it left a kernel out: the one these tests turn into an error.
    Only this one: others (a library's deprecation, Python's fork-while-threaded warning when a compile
    spawns ptxas) would fail a pool task and say nothing about attribution."""
    from karchive.producer.capture.jit_capture import CaptureIncompleteWarning

    return CaptureIncompleteWarning


def _blocks(cap) -> list[int]:
    return sorted(
        p["value"] for v in cap.variants.values() for p in v.variant.to_json()["params"] if p["name"] == "BLOCK"
    )


def _on_thread(fn, *args, name: str = "worker") -> None:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn(*args)
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=run, name=name)
    t.start()
    t.join()
    if errors:
        raise errors[0]


@pytest.fixture(autouse=True)
def _fresh_kernels():
    from capture_fakes import fresh, scale_rows

    fresh(scale_rows)


def test_compiles_on_other_threads_are_recorded_by_default(gpu):
    import karchive

    with warnings.catch_warnings():
        warnings.simplefilter("error", _incomplete())  # nothing left out
        with karchive.capture("proc", version="1", strict=True) as cap:
            _compile(32)
            _on_thread(_compile, 64, name="request-7")
    assert _blocks(cap) == [32, 64]
    by_block = {
        p["value"]: e
        for e in cap.events
        for v in [cap.variants[e.key]]
        for p in v.variant.to_json()["params"]
        if p["name"] == "BLOCK"
    }
    assert by_block[64].thread == "request-7" and by_block[64].note == "unowned thread"
    assert by_block[32].thread == threading.current_thread().name and by_block[32].note == ""
    s = cap.summary()
    assert (
        s["scope"] == "process"
        and s["left_out"] == []
        and s["window"] == {"windows": 1, "compiled": 2, "loaded_from_cache": 0, "other_processes": 0}
    )


def test_thread_scope_leaves_other_threads_out_and_says_why(gpu):
    import karchive
    from karchive.errors import CaptureError
    from karchive.producer.capture.jit_capture import CaptureIncompleteWarning

    with pytest.warns(
        CaptureIncompleteWarning,
        match=r"\[out-of-scope\] scale_rows .*thread 'request-8'.*"
        r"scope='thread'",
    ):
        with karchive.capture("iso", version="1", scope="thread") as cap:
            _compile(32)
            _on_thread(_compile, 64, name="request-8")
    assert _blocks(cap) == [32]
    (item,) = cap.left_out
    assert (item.category, item.kernel, item.thread) == ("out-of-scope", "scale_rows", "request-8")
    assert cap.summary()["lost"] == 1

    from capture_fakes import fresh, scale_rows

    fresh(scale_rows)
    with pytest.raises(CaptureError, match=r"strict.*1 kernel\(s\) compiled during the capture are not in the archive"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with karchive.capture("iso", version="1", scope="thread", strict=True):
                _on_thread(_compile, 128, name="request-9")
    with pytest.raises(CaptureError, match="scope"):
        karchive.capture("x", version="1", scope="global")


def test_pool_tasks_follow_the_capture_that_submitted_them(gpu):
    """Two captures on two threads share one thread pool: each gets exactly the kernels of its own tasks."""
    import karchive

    # A timeout, and abort() on failure: a thread that fails must fail the test, not leave the other
    # waiting at the barrier forever.
    barrier = threading.Barrier(2, timeout=300)
    caps: dict[str, object] = {}
    errors: list[BaseException] = []
    with ThreadPoolExecutor(2, thread_name_prefix="shared-pool") as pool:

        def work(label: str, blocks: list[int], scope: str) -> None:
            try:
                with karchive.capture(label, version="1", scope=scope, strict=True) as cap:
                    barrier.wait()
                    for f in [pool.submit(_compile, b) for b in blocks]:
                        f.result()
                    barrier.wait()  # both windows stay open until both threads are done
                caps[label] = cap
            except BaseException as exc:
                errors.append(exc)
                barrier.abort()

        with warnings.catch_warnings():
            warnings.simplefilter("error", _incomplete())
            threads = [
                threading.Thread(target=work, args=("a", [32, 64], "thread")),
                threading.Thread(target=work, args=("b", [128, 256], "process")),
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    assert not errors, errors
    a, b = caps["a"], caps["b"]
    assert (_blocks(a), _blocks(b)) == ([32, 64], [128, 256])
    assert {e.note for e in a.events} == {e.note for e in b.events} == {"handed over (thread pool)"}
    assert all(e.thread.startswith("shared-pool") for e in a.events + b.events)
    # Each saw the other's compiles in its window: listed as held elsewhere, not as lost.
    assert {i.category for i in a.left_out} == {"elsewhere"} and len(a.left_out) == 2
    assert all("'b'" in i.reason for i in a.left_out) and a.summary()["lost"] == 0


def test_unowned_work_during_two_captures_goes_to_both_and_their_own_stays_apart(gpu):
    import karchive

    ready, done = threading.Barrier(3, timeout=300), threading.Event()
    caps: dict[str, object] = {}

    def work(label: str, block: int) -> None:
        with karchive.capture(label, version="1") as cap:
            _compile(block)
            ready.wait()
            done.wait(300)
        caps[label] = cap

    threads = [threading.Thread(target=work, args=("a", 32)), threading.Thread(target=work, args=("b", 64))]
    for t in threads:
        t.start()
    ready.wait()
    _on_thread(_compile, 512, name="server-thread")  # belongs to neither: both process-scope captures get it
    done.set()
    for t in threads:
        t.join()
    a, b = caps["a"], caps["b"]
    assert (_blocks(a), _blocks(b)) == ([32, 512], [64, 512])
    shared = [e for e in a.events if e.thread == "server-thread"]
    assert len(shared) == 1 and shared[0].note == "unowned thread"
    assert [i.category for i in a.left_out] == ["elsewhere"] and "'b'" in a.left_out[0].reason


def _fake_backward(callbacks, **kwargs):
    """TEST DOUBLE for ``torch.autograd.backward``: runs the graph's callbacks on an engine thread of its own and
    waits, as PyTorch's engine does for CUDA tensors (CPU-only torch would run them on the calling thread)."""
    _on_thread(lambda: [cb() for cb in callbacks], name="pt_autograd_0")


def _fake_grad(callbacks, **kwargs):
    _fake_backward(callbacks)
    return ()


@pytest.fixture
def fake_autograd(monkeypatch):
    torch = types.ModuleType("torch")
    autograd = types.ModuleType("torch.autograd")
    autograd.backward, autograd.grad = _fake_backward, _fake_grad
    torch.autograd = autograd
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch.autograd", autograd)
    return autograd


def test_backward_on_the_engine_thread_follows_the_capture_waiting_for_it(gpu, fake_autograd):
    import karchive

    original = fake_autograd.backward
    other_ready, other_done = threading.Event(), threading.Event()
    holder: dict[str, object] = {}

    def other() -> None:  # a second process-scope capture, active on another thread the whole time
        with karchive.capture("other", version="1") as cap:
            other_ready.set()
            other_done.wait()
        holder["other"] = cap

    t = threading.Thread(target=other)
    t.start()
    other_ready.wait()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", _incomplete())
            with karchive.capture("train", version="1", scope="thread", strict=True) as cap:
                _compile(32)  # forward, on this thread
                assert fake_autograd.backward is not original  # wrapped while captures are active
                sys.modules["torch.autograd"].backward([lambda: _compile(64), lambda: _compile(128)])
                sys.modules["torch.autograd"].grad([lambda: _compile(256)])
    finally:
        other_done.set()
        t.join()
    assert fake_autograd.backward is original  # restored
    assert _blocks(cap) == [32, 64, 128, 256]
    engine = [e for e in cap.events if e.thread == "pt_autograd_0"]
    assert len(engine) == 3 and all(e.note.startswith("autograd engine") for e in engine)
    assert _blocks(holder["other"]) == []  # told apart: the backward belongs to the capture waiting for it
    assert {i.category for i in holder["other"].left_out} == {"elsewhere"}


def test_async_compile_on_a_foreign_executor_is_recorded_on_the_waiting_thread(gpu):
    """An executor that is not a ThreadPoolExecutor is not followed; Triton's post-compile hook, which runs on
    the thread that waits for the result, records the kernel instead."""
    from capture_fakes import ptr, scale_rows
    from triton.runtime._async_compile import AsyncCompileMode

    import karchive

    class ThreadPerTask(Executor):
        def submit(self, fn, /, *args, **kwargs):
            f: Future = Future()

            def run() -> None:
                try:
                    f.set_result(fn(*args, **kwargs))
                except BaseException as exc:
                    f.set_exception(exc)

            threading.Thread(target=run, name="foreign-compile").start()
            return f

    with warnings.catch_warnings():
        warnings.simplefilter("error", _incomplete())
        with karchive.capture("async", version="1", scope="thread", strict=True) as cap:
            with AsyncCompileMode(ThreadPerTask()):
                scale_rows.warmup(ptr(), ptr(), 1000, 2.0, BLOCK=32, grid=(1,))
    (event,) = cap.events
    assert event.how == "async" and event.thread == threading.current_thread().name
    assert _blocks(cap) == [32] and cap.left_out == []


def test_hooks_and_followers_are_restored(gpu):
    from triton.runtime.autotuner import Autotuner, Heuristics
    from triton.runtime.jit import JITFunction

    import karchive

    before = (ThreadPoolExecutor.submit, JITFunction.run, Autotuner.run, Heuristics.run)
    with karchive.capture("r", version="1"):
        assert ThreadPoolExecutor.submit is not before[0] and Heuristics.run is not before[3]
        _compile(32)
    assert (ThreadPoolExecutor.submit, JITFunction.run, Autotuner.run, Heuristics.run) == before
