"""``istar-run``: compose a run config from recipes and overrides, then train and evaluate.

    istar-run recipe=sst2 criterion=istar model=minilm criterion.lam=-3 data.dir=../shared/data/sst2
    istar-run recipe=sst2 criterion=istar --cfg        # print the resolved config and exit
    istar-run --list criterions                        # or recipes, models, tasks
    istar-run -m recipe=sst2 criterion=istar criterion.lam=-5,-1 seed=1,2,3 launcher=local local.parallelism=2
    istar-run -m recipe=sst2 criterion.lam=-5,-3 seed=1,2 slurm=gpu_a100 --dry-run

``-m`` (multirun) sweeps every ``key=a,b,c`` and runs each combination as a cell of a grid (see
``istar-grid --help`` for ``launcher=``, ``slurm=``, ``local.*`` and ``grid_dir=``).
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Optional, Sequence

from . import config as config_module
from .progress import criterion_description
from .registry import REGISTRIES, load_plugins

LISTABLE = ("criterions", "recipes", "models", "tasks")


def listing(what: str) -> list[str]:
    """Names for ``--list``: registered classes, or recipe YAMLs (models also list their presets)."""
    load_plugins()
    if what == "recipes":
        return config_module.available()
    if what == "models":
        return [f"{name} (preset)" for name in config_module.available("model")] + [
            f"{name} (adapter)" for name in REGISTRIES["models"].names()
        ]
    return REGISTRIES[what].names()


def summary(results: dict) -> str:
    """The lines printed at the end of a run: what was trained, with which criterion, and before/after scores."""
    main = results["main_metric"]
    lines = [f"{results['task']} with {results['model']}, criterion {criterion_description(results['criterion'])}, "
             f"seed {results['seed']}"]
    if results.get("initial"):
        initial = results["initial"]
        lines.append(f"before fine-tuning: {main} = {initial[main]:.4f}, eval IsoScore* = {initial['eval_isoscore_star']:.4f}")
    lines.append(
        f"after {results['step']} steps:  {main} = {results['metrics'][main]:.4f}, "
        f"eval IsoScore* = {results['eval_isoscore_star']:.4f}"
    )
    return "\n".join(lines)


def multirun(arguments: list[str], dry_run: bool) -> int:
    """``istar-run -m``: the arguments as a sweep, launched like a grid file's cells."""
    from . import grid, grid_cli, profiles

    try:
        options, rest = profiles.parse(arguments)
        return grid_cli.run(grid.sweep(rest), options, ["-m", *arguments], dry_run)
    except (grid.GridError, profiles.LaunchError) as error:
        print(f"istar-run: {error}", file=sys.stderr)
        return 2


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="istar-run", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cfg", action="store_true", help="print the resolved config and exit")
    parser.add_argument("--list", choices=LISTABLE, help="list what can be chosen and exit")
    parser.add_argument("-m", "--multirun", action="store_true", help="sweep key=a,b,c values as a grid of runs")
    parser.add_argument("--dry-run", action="store_true", help="with -m: print the cells (and sbatch script) only")
    parser.add_argument("overrides", nargs="*", help="group=option (recipe, criterion, model) and key.sub=value")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(listing(args.list)))
        return 0
    if args.multirun:
        return multirun(list(args.overrides), args.dry_run)
    if args.dry_run:
        parser.error("--dry-run needs -m/--multirun")
    try:
        cfg = config_module.compose(list(args.overrides))
    except (config_module.ConfigError, KeyError) as error:
        print(f"istar-run: {error.args[0] if error.args else error}", file=sys.stderr)
        return 2
    if args.cfg:
        print(config_module.to_yaml(cfg), end="")
        return 0
    from .trainer import Trainer

    trainer = Trainer(cfg)
    results = trainer.fit()
    if trainer.dist.is_main:
        print(summary(results))
        print(f"results: {trainer.output_dir / 'results.json'}")
        print(f"TensorBoard logs: {trainer.output_dir / 'tensorboard'}  (tensorboard --logdir {trainer.output_dir})")
        print(json.dumps({k: results["metrics"][k] for k in results["metrics"] if k != "eval_isoscore_star_per_layer"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
