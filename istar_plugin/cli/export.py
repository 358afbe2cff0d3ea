"""``istar-export RUN_DIR``: a run's checkpoint as a Hugging Face model folder.

The folder holds ``save_pretrained`` of the model and its tokenizer, with the task's label names in
``id2label``/``label2id``, so ``AutoModelForSequenceClassification`` (or ``...ForQuestionAnswering``) and
``transformers.pipeline`` load it like any hub model:

    istar-export runs/sst2/istar/seed42                       # the latest checkpoint -> RUN_DIR/model
    istar-export runs/sst2/istar/seed42 --step 300 --out sst2-step300
    istar-export runs/diverged --out diverged-step57          # a failed or unfinished run: only with --out

RUN_DIR/model is a finished run's: the last checkpoint of a failed or unfinished run is exported only to --out (and
no run's model/ takes another checkpoint than that finished run's latest), and every export holds export.json naming
the run, its state and the checkpoint.
"""
from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from ..errors import ConfigError, run_command
from ..storage.user_paths import path_argument
from . import command_parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = command_parser("istar-export", __doc__)
    parser.add_argument("run_dir", type=path_argument, help="a run directory (holding checkpoints/step_*.pt)")
    parser.add_argument("--step", type=int, help="the checkpoint's step (default: the latest)")
    parser.add_argument("--out", type=path_argument,
                        help="where to write (default, for a finished run only: RUN_DIR/model, or RUN_DIR/model_step_N "
                             "with --step)")
    args = parser.parse_args(argv)
    return run_command("istar-export", lambda: export(args))


def export(args: argparse.Namespace) -> int:
    """Export the checkpoint and say where it went."""
    from ..training.export import EXPORT_RECORD, export_checkpoint, unfinished_words

    try:
        exported = export_checkpoint(args.run_dir, args.step, args.out)
    except FileNotFoundError as error:
        raise ConfigError(str(error)) from None
    state = "" if exported.run == "finished" else (
        f": NOT a finished result, the run {unfinished_words(exported.run)}; {exported.directory / EXPORT_RECORD} "
        "records it")
    print(f"exported step {exported.step} to {exported.directory}{state} "
          "(load with AutoModelForSequenceClassification/...ForQuestionAnswering or pipeline())")
    return 0


if __name__ == "__main__":
    sys.exit(main())
