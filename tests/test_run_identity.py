"""harness.common.run_identity: the settings that define a workload and their hash, alone (no files, no runs).
train.py's names are tested in test_train_cli.py, compare's grouping and warnings on real runs in test_compare.py."""

from __future__ import annotations

from harness.common.run_identity import WORKLOAD_SETTINGS, trial_name, workload, workload_hash

# summary.json's settings of `python train.py` on a CPU machine (TrainConfig.to_dict() once resolved), less
# what is not part of the workload.
DEFAULT_CPU_RUN = {
    "model": "resnet50", "image_size": 224, "seq_len": None, "batch_size": 4, "accumulate_grad_batches": 1,
    "precision": "32-true", "accelerator": "cpu", "devices": 2, "num_nodes": 1, "comm_hook": "allreduce",
    "powersgd_rank": 1, "bucket_cap_mb": None, "gradient_as_bucket_view": False, "static_graph": False,
    "channels_last": False, "data_dir": None, "max_steps": 20,
}  # fmt: skip


def test_the_hash_is_stable():
    """Pinned: a change here renames every run and splits old runs from new repeats; make it on purpose only."""
    assert workload_hash(DEFAULT_CPU_RUN) == "67f637"
    assert workload_hash(dict(reversed(DEFAULT_CPU_RUN.items()))) == "67f637", "key order does not matter"


def test_every_workload_setting_changes_the_hash():
    changed = {
        "model": "resnet18", "image_size": 64, "seq_len": 128, "batch_size": 8, "accumulate_grad_batches": 2,
        "precision": "bf16-mixed", "accelerator": "gpu", "devices": 8, "num_nodes": 2, "comm_hook": "fp16",
        "bucket_cap_mb": 5.0, "gradient_as_bucket_view": True, "static_graph": True, "channels_last": True,
        "data_dir": "/data/imagenet/train", "max_steps": 200,
    }  # fmt: skip
    assert set(changed) == set(WORKLOAD_SETTINGS) - {"powersgd_rank"}
    hashes = {key: workload_hash({**DEFAULT_CPU_RUN, key: value}) for key, value in changed.items()}
    assert len(set(hashes.values()) | {"67f637"}) == len(changed) + 1, hashes
    powersgd = {**DEFAULT_CPU_RUN, "comm_hook": "powersgd"}
    assert workload_hash({**powersgd, "powersgd_rank": 2}) != workload_hash(powersgd), "PowerSGD's rank counts"
    assert workload_hash({**DEFAULT_CPU_RUN, "powersgd_rank": 2}) == "67f637", "...for PowerSGD only"


def test_what_does_not_define_the_workload_leaves_the_hash():
    measurement = {"seed": 7, "calibration_every": 10, "log_every": 50, "gather_every": 0, "logdir": "elsewhere"}
    measurement |= {"run_name": "mine", "timeout_s": 30.0, "progress_bar": False, "window_start": 9}
    assert workload_hash({**DEFAULT_CPU_RUN, **measurement}) == "67f637"


def test_the_event_files_hparams_give_the_same_hash():
    """The HParams plugin stores integers and booleans as floats (compare reads them back so where summary.json
    is damaged); one data folder spelled two ways is one data source."""
    hparams = {key: float(value) if isinstance(value, bool | int) else value for key, value in DEFAULT_CPU_RUN.items()}
    assert hparams["static_graph"] == 0.0 and hparams["devices"] == 2.0
    assert workload_hash(hparams) == "67f637"
    assert workload_hash({**DEFAULT_CPU_RUN, "bucket_cap_mb": 0.5}) == workload_hash({**hparams, "bucket_cap_mb": 0.5})
    assert workload({"data_dir": "./images/"})["data_dir"] == "images" == workload({"data_dir": "images"})["data_dir"]


def test_an_older_summary_without_some_settings_still_has_an_identity():
    old = {key: value for key, value in DEFAULT_CPU_RUN.items() if key not in ("channels_last", "max_steps")}
    assert workload(old)["channels_last"] is None and len(workload_hash(old)) == 6
    assert workload_hash({}) == workload_hash({"model": None}), "nothing recorded: one unknown workload"


def test_the_trial_name_is_the_hash_and_the_start_time_and_fits_tensorboards_column():
    """The HParams tab's Trial ID column shows about 13 digits whole (docs/tensorboard/hparams.png)."""
    assert trial_name(DEFAULT_CPU_RUN, "20261204-134512") == "67f637 134512"
    assert trial_name(DEFAULT_CPU_RUN, "20261204-134512-2") == "67f637 134512-2", "a second run of that second"
    assert trial_name({**DEFAULT_CPU_RUN, "batch_size": 8}, "20261204-134512") != "67f637 134512"
    assert trial_name(DEFAULT_CPU_RUN, "my-version") == "67f637 my-version", "a version of another form, whole"
