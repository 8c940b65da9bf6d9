"""bench.host_profile's reading of py-spy's --native samples: which thread ran, and which waited for the GIL.

Every stack is py-spy 0.4.3's own output (`record --native --idle --threads --format raw`), its last frames kept:
- GIL_WAIT, RUNNING: three Python threads burning CPU on this machine (Python 3.11), two of three waiting for the GIL
  at any time;
- QUEUE_WAIT: train.py's harness thread idle between jobs, on this machine;
- RETAKE_*, WRITER_*: train.py on the lent H100 (Python 3.12, torch 2.11), 2026-12-05: the main thread taking the GIL
  back after a torch call, TensorBoard's writer thread after a file write, and the same thread waiting for its queue.
py-spy folds CPython's eval loop, take_gil included, into the Python frame it runs (or drops it under a C caller),
which is why a GIL wait shows as a timed condition wait right under a Python frame or a C binding.
"""

from pathlib import Path

from bench.host_profile import native_leaves, waits_for_gil

PREFIX = "0x7fc2313278ec (libc.so.6);0x7fc2312a71f5 (libc.so.6);thread_run (libpython3.11.so.1.0);"
THREAD = (
    "Thread._bootstrap (threading.py:1002);Thread._bootstrap_inner (threading.py:1045);Thread.run (threading.py:982);"
)
GIL_WAIT = "burn (gilburn.py:5);pthread_cond_timedwait (libc.so.6);0x7fc2312a3f16 (libc.so.6)"
RUNNING = "burn (gilburn.py:5);time_time (libpython3.11.so.1.0);clock_gettime (libc.so.6)"
QUEUE_WAIT = (
    "StepWorker._serve (harness/train/step_worker.py:68);_queue_SimpleQueue_get (_queuemodule.c.h:177);"
    "_queue_SimpleQueue_get_impl (_queuemodule.c:256);pthread_cond_timedwait (libc.so.6);0x7f1067ca3f16 (libc.so.6)"
)
RETAKE_BINDING = (
    "StepStamps.now (harness/train/stamps.py:163);Event.record (torch/cuda/streams.py:209);"
    "THCPEvent_record (libtorch_python.so);pthread_cond_timedwait (libc.so.6);0x7f0e00498e51 (libc.so.6)"
)
RETAKE_PYBIND = (
    "_make_grads (torch/autograd/__init__.py:231);torch::autograd::THPVariable_ones_like (libtorch_python.so);"
    "pybind11::gil_scoped_release::~gil_scoped_release (libtorch_python.so);pthread_cond_timedwait (libc.so.6);"
    "0x7ff575698e51 (libc.so.6)"
)
WRITER_GIL = (
    "LocalFileSystem.append (tensorboard/compat/tensorflow_stub/io/gfile.py:167);LocalFileSystem._write "
    "(tensorboard/compat/tensorflow_stub/io/gfile.py:171);pthread_cond_timedwait (libc.so.6);0x7ff575698e51 (libc.so.6)"
)
WRITER_QUEUE = (
    "Queue.get (queue.py:180);Condition.wait (threading.py:359);pthread_cond_timedwait (libc.so.6);"
    "0x7ff575698e51 (libc.so.6)"
)
AUTOGRAD_IDLE = (
    "torch::autograd::Engine::thread_main (libtorch_cpu.so);torch::autograd::ReadyQueue::pop (libtorch_cpu.so);"
    "std::condition_variable::wait (libstdc++.so.6);pthread_cond_wait (libc.so.6);0x7f0e00498e51 (libc.so.6)"
)


def frames(stack: str) -> list[str]:
    return (PREFIX + THREAD + stack).split(";")


def test_a_timed_condition_wait_under_a_python_frame_or_a_binding_is_the_gil() -> None:
    for stack in (GIL_WAIT, RETAKE_BINDING, RETAKE_PYBIND, WRITER_GIL):
        assert waits_for_gil(frames(stack)), stack
    for stack in (QUEUE_WAIT, WRITER_QUEUE, AUTOGRAD_IDLE, RUNNING):  # waits of their own, and a running thread
        assert not waits_for_gil(frames(stack)), stack


def test_native_leaves_counts_running_and_gil_waits_per_thread(tmp_path: Path) -> None:
    raw = tmp_path / "raw.txt"
    raw.write_text(
        "\n".join(
            [
                f"thread (8048): burner0;{PREFIX}{THREAD}{GIL_WAIT} 90",
                f"thread (8048): burner0;{PREFIX}{THREAD}{RUNNING} 30",
                f"thread (7962): harness-step-worker;{PREFIX}{THREAD}{QUEUE_WAIT} 50",
            ]
        )
        + "\n"
    )
    # 100 Hz over 1.2 s of 10 steps: a sample is 10 ms, so 1 ms a step per 1 sample per step.
    threads = native_leaves(raw, rate=100, steps=10)
    assert threads["burner0"]["ms_per_step"] == 30.0
    assert threads["burner0"]["gil_wait_ms_per_step"] == 90.0
    assert threads["burner0"]["top"][0][0] == "clock_gettime"
    assert threads["harness-step-worker"] == {"ms_per_step": 0.0, "gil_wait_ms_per_step": 0.0, "top": []}
