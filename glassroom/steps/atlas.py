"""The data atlas as a pipeline step: `glassroom data atlas` of a data step's dataset.

    data = data_build_step("demo-data", "data-demo.yaml")
    atlas = atlas_step("demo-atlas", data, k=40)

The atlas is written where `glassroom data atlas` writes it, beside the dataset it describes
(`<data output>/dataset/atlas/atlas.json`), so `glassroom serve` and `glassroom publish` of the
workspace show it with the dataset (glassroom/web/atlas_page.py finds datasets, not steps). The
step's own folder keeps its result (k, purity, sample, timings). The options are checked when the
experiment loads: a wrong one is a one-line error before anything runs. Rebuilding the dataset in
place (`--force demo-data`) replaces the dataset folder and with it the atlas: force the atlas
step too. `glassroom demo` runs this step after the corpus (glassroom/demo.py).
"""

from __future__ import annotations

from pathlib import Path

from glassroom.pipeline.context import StepContext
from glassroom.pipeline.step import Resources, Step
from glassroom.steps.data import LogLines


def _whole(name: str, key: str, value, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name}: {key} must be a whole number of at least {least}, got {value!r}")
    return value


def atlas_step(name: str, data: Step, *, k: int = 40, sample: int = 20_000, sampling: str = "uniform",
               method: str | None = None, seed: int = 0, max_tokens: int = 512, subpath: str = "dataset",
               cpus: float = 2, deps: tuple = ()) -> Step:
    """A step that computes the atlas of `data`'s dataset (`<output of data>/<subpath>`) at k clusters."""
    from glassroom.data.atlas import SAMPLINGS  # lazy: numpy loads only when this runs
    from glassroom.data.embed import DEFAULT_METHOD, METHODS  # lazy: numpy loads only when this runs

    if not isinstance(data, Step):
        raise ValueError(f"{name}: data must be a data step (data_build_step), got {type(data).__name__}")
    config = {"dataset": data / subpath, "k": _whole(name, "k", k, 1), "sample": _whole(name, "sample", sample, 1),
              "seed": _whole(name, "seed", seed, 0), "max_tokens": _whole(name, "max_tokens", max_tokens, 8)}
    if sampling not in SAMPLINGS:
        raise ValueError(f"{name}: sampling must be one of {', '.join(SAMPLINGS)}, got {sampling!r}")
    method = DEFAULT_METHOD if method is None else method
    if method not in METHODS:
        raise ValueError(f"{name}: method must be one of {', '.join(METHODS)}, got {method!r}")
    if k > sample:
        raise ValueError(f"{name}: k ({k}) is more than the {sample} documents sampled; lower k or raise sample")
    config.update(sampling=sampling, method=method)
    return Step(name, make_atlas, config, kind="data", resources=Resources(cpus=cpus), deps=deps,
                description=f"glassroom data atlas {data.name} --k {k}")


def make_atlas(ctx: StepContext) -> dict:
    from glassroom.data.atlas import build_atlas  # lazy: numpy loads only when this runs

    cfg = ctx.config
    atlas = build_atlas(cfg["dataset"], k=cfg["k"], sample=cfg["sample"], sampling=cfg["sampling"], method=cfg["method"],
                        seed=cfg["seed"], max_tokens=cfg["max_tokens"], log=LogLines(ctx), progress_interval=5.0)
    return {"atlas": str(Path(cfg["dataset"]) / "atlas" / "atlas.json"),
            "k": atlas["k"], "sampled": atlas["sampling"]["sampled"], "domain_purity": atlas["domain_purity"],
            "embed_docs_per_s": atlas["timings"]["embed_docs_per_s"],
            "quality": atlas["quality"] is not None}
