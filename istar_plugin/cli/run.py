"""``istar-run``: compose a run config from recipes and overrides, then train and evaluate.

    istar-run recipe=sst2 criterion=istar model=minilm criterion.lam=-3 data.dir=../shared/data/sst2   # source: files
    istar-run recipe=sst2 criterion=istar --cfg        # print the resolved config and exit
    istar-run --list criterions                        # or recipes, models, tasks, engines
    istar-run --help optim.lr                          # a key's type, default, help and allowed values
    istar-run --help model                             # a group's (or model.name's, ...) choices
    istar-run -m recipe=sst2 criterion=istar criterion.lam=-5,-1 seed=1,2,3 launcher=local local.parallelism=2
    istar-run -m recipe=sst2 criterion.lam=-5,-3 seed=1,2 slurm=gpu_a100 --dry-run

``-m`` (multirun) sweeps every ``key=a,b,c`` and runs each combination as a cell of a grid (see
``istar-grid --help`` for ``launcher=``, ``slurm=``, ``local.*`` and ``grid_dir=``; ``output_dir=`` of a sweep
is its ``grid_dir``). ``data.dir=`` (or ``data.train_file=``/``data.eval_file=``) without ``data.source=``
means ``data.source=files``. A run that needs the Hugging Face hub checks it first and, when it cannot be
reached, says which model or data set it could not fetch and the offline way.
"""
from __future__ import annotations

import json
import sys
from typing import Optional, Sequence

from .. import config as config_module
from ..errors import TRACEBACK_ENV, run_command
from ..registry import ENGINES, REGISTRIES
from . import command_parser

LISTABLE = ("criterions", "recipes", "models", "tasks", "engines")


def listing(what: str) -> list[str]:
    """Names for ``--list``: registered classes, or recipe YAMLs (models also list their presets)."""
    if what == "recipes":
        return config_module.available()
    if what == "models":
        return config_module.model_choices()
    return REGISTRIES[what].names()


def multirun(arguments: list[str], dry_run: bool) -> int:
    """``istar-run -m``: the arguments as a sweep, launched like a grid file's cells."""
    from ..launch import grid
    from ..launch import options as profiles
    from . import grid as grid_cli

    keys = [argument.partition("=")[0] for argument in arguments]
    if "output_dir" in keys and "grid_dir" in keys:
        raise grid.GridError("give output_dir= or grid_dir= to a sweep, not both: either names the grid directory")
    arguments = [f"grid_dir={argument.partition('=')[2]}" if key == "output_dir" else argument  # its grid directory
                 for key, argument in zip(keys, arguments)]
    options, rest = profiles.parse(arguments)
    return grid_cli.run(grid.sweep(rest), options, ["-m", *arguments], dry_run)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = command_parser("istar-run", __doc__)
    arguments = list(sys.argv[1:] if argv is None else argv)
    if len(arguments) >= 2 and arguments[0] in ("-h", "--help") and "=" not in arguments[1]:
        return run_command("istar-run", lambda: describe(arguments[1:]))
    parser.add_argument("--cfg", action="store_true", help="print the resolved config and exit (--help KEY: one key)")
    parser.add_argument("--list", choices=LISTABLE, help="list what can be chosen and exit")
    parser.add_argument("-m", "--multirun", action="store_true", help="sweep key=a,b,c values as a grid of runs")
    parser.add_argument("--dry-run", action="store_true", help="with -m: print the cells (and sbatch script) only")
    parser.add_argument("--traceback", action="store_true",
                        help=f"show the traceback of an expected failure too (or set {TRACEBACK_ENV}=1); bugs "
                             "always show it")
    parser.add_argument("overrides", nargs="*", help="group=option (recipe, criterion, model) and key.sub=value")
    # key=value may follow a flag: istar-run recipe=sst2 --cfg model=minilm
    args = parser.parse_intermixed_args(arguments)
    if args.list:
        print("\n".join(listing(args.list)))
        return 0
    if args.multirun:
        return run_command("istar-run", lambda: multirun(list(args.overrides), args.dry_run), args.traceback)
    if args.dry_run:
        parser.error("--dry-run needs -m/--multirun")
    return run_command("istar-run", lambda: run(list(args.overrides), args.cfg), args.traceback)


def describe(keys: list[str]) -> int:
    """``istar-run --help KEY...``: each key's declaration, or a group's choices."""
    print("\n".join(config_module.describe_key(key) for key in keys))
    return 0


def run(overrides: list[str], print_config: bool = False) -> int:
    """Compose the config, then print it or train; expected failures raise :class:`~istar_plugin.errors.RunError`."""
    cfg = config_module.compose(overrides)
    if print_config:
        print(config_module.to_yaml(cfg), end="")
        return 0
    from ..launch import hub_check

    hub_check.check(cfg)
    trainer = ENGINES.get(cfg.engine).cls(cfg)
    results = trainer.fit()
    if trainer.is_main:
        from ..training.progress import run_summary

        print(run_summary(results))
        print(f"results: {trainer.output_dir / 'results.json'}")
        print(f"TensorBoard logs: {trainer.output_dir / 'tensorboard'}  (tensorboard --logdir {trainer.output_dir})")
        print(json.dumps({k: results["metrics"][k] for k in results["metrics"] if k != "eval_isoscore_star_per_layer"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
