"""bench.host_profile's reading of py-spy's --native samples: which thread ran, and which waited for the GIL.

The stacks but RETAKE are py-spy 0.4.3's own output (`record --native --idle --threads --format raw`), taken on this
machine from three Python threads burning CPU (two of three wait for the GIL at any time) and from train.py's harness
thread idle between jobs. py-spy folds CPython's eval loop, take_gil included, into the Python frame it runs, which
is why a GIL wait shows as a condition wait right under a Python frame.
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
# Written by hand, not captured: a C extension's call taking the GIL back through CPython's exported function.
RETAKE = "Event.record (torch/cuda/streams.py:190);PyEval_RestoreThread (libpython3.12.so);pthread_cond_wait (libc.so)"


def frames(stack: str) -> list[str]:
    return (PREFIX + THREAD + stack).split(";")


def test_a_condition_wait_under_a_python_frame_is_the_gil() -> None:
    assert waits_for_gil(frames(GIL_WAIT))
    assert waits_for_gil(frames(RETAKE))  # a C extension taking the GIL back
    assert not waits_for_gil(frames(QUEUE_WAIT))  # a Python queue's own wait, in C
    assert not waits_for_gil(frames(RUNNING))


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
