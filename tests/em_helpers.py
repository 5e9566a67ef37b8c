"""Reading what ``em`` wrote, the way a reader outside the training process would."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def metric_lines(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n"), "metrics.jsonl ends with a whole line"
    return [json.loads(line) for line in text.splitlines()]


def run_record(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "run.json").read_text(encoding="utf-8"))


def tensorboard(logdir: Path) -> tuple[dict[str, list[tuple[int, float]]], dict[str, Any], list[str]]:
    """(scalars by tag as (step, value), the session's hparams, the experiment's metric tags)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    acc.Reload()
    scalars = {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    hparams: dict[str, Any] = {}
    metrics: list[str] = []
    try:
        tagged = acc.PluginTagToContent("hparams")
    except KeyError:  # no hparams written
        tagged = {}
    for content in tagged.values():
        data = plugin_data_pb2.HParamsPluginData.FromString(content)
        for name, value in data.session_start_info.hparams.items():
            hparams[name] = getattr(value, value.WhichOneof("kind"))
        metrics += [m.name.tag for m in data.experiment.metric_infos]
    return scalars, hparams, metrics
