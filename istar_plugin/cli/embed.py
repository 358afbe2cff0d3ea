"""``istar-embed MODEL_OR_RUN --sts DIR``: sentence embeddings on STS-B, raw and after post-hoc transforms.

MODEL_OR_RUN is a finished run directory (its final model, read only), an exported model or any Hugging Face folder,
a model preset (``minilm``), a hub name, or a GGUF file (``.gguf``, dequantised). Each transform is fitted on
``--fit`` (the STS-B training split, ``dev``, or a text file of one sentence a line; ``--fit-max N``: a seeded sample)
and applied to ``--split``. Writes ``OUT/embeddings.json`` (per layer and transform: STS-B Spearman x100 of cosine
similarity and the isotropy measures; an undefined measure is null with its reason), ``embeddings.md``,
``embeddings.png`` and the fitted transforms under ``transforms/``; OUT holds this invocation's files alone and is
locked while it writes (docs/sentence_embeddings.md).

    istar-embed minilm --sts ../shared/data/stsb --transforms none,center,whiten:256,abtt:2 --out stsb-minilm
    istar-embed runs/stsb/seed1 --sts ../shared/data/stsb --layer all --pooling cls
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from ..errors import ConfigError, DataError, RunError, one_line, run_command
from ..storage.user_paths import path_argument, text_argument
from . import command_parser

SPLITS = ("train", "dev")  # analysis.sts_embeddings.SPLITS, named here so that --help imports no torch
POOLINGS = ("mean", "cls", "first_last_mean", "last_token")  # models.sentence_encoder.POOLINGS, likewise

def _layers(text: str) -> Optional[list[int]]:
    """``all`` (None: every layer) or one integer."""
    if text == "all":
        return None
    try:
        return [int(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--layer {text!r}: expected an integer (0 = embeddings, -1 = last) or 'all'") from None


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = command_parser("istar-embed", __doc__)
    parser.add_argument("model", metavar="MODEL_OR_RUN", type=text_argument,
                        help="run directory, model folder, preset (minilm) or hub name")
    parser.add_argument("--sts", type=path_argument, required=True, metavar="DIR",
                        help="a GLUE STS-B folder (train.tsv, dev.tsv)")
    parser.add_argument("--split", choices=SPLITS, default="dev", help="the split evaluated (default dev)")
    parser.add_argument("--pooling", choices=POOLINGS, default="mean",
                        help="sentence vector from tokens (default mean)")
    parser.add_argument("--layer", type=_layers, default=[-1],
                        help="hidden state: 0 = embeddings, -1 = last (default), or all")
    parser.add_argument("--transforms", default="none,center,whiten:256,abtt:2",
                        help="comma-separated: none, center, whiten:K, abtt:D, composed with + (default %(default)s)")
    parser.add_argument("--fit", default="train", type=text_argument,
                        help="what transforms are fitted on: train, dev or a text file (default train)")
    parser.add_argument("--fit-max", type=int,
                        help="fit on a seeded sample of at most this many fit sentences (default: all)")
    parser.add_argument("--zeta", type=float, default=0.2,
                        help="IsoScore* shrinkage toward the fit set's covariance (default 0.2)")
    parser.add_argument("--max-length", type=int, default=128, help="tokens per sentence (default 128)")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per forward pass (default 64)")
    parser.add_argument("--out", type=path_argument, default=Path("embeddings"),
                        help="output directory (default ./embeddings)")
    args = parser.parse_args(argv)
    for name, low in (("max_length", 8), ("batch_size", 1), ("fit_max", 2)):
        if getattr(args, name) is not None and getattr(args, name) < low:
            parser.error(f"--{name.replace('_', '-')} must be at least {low}, got {getattr(args, name)}")
    if not 0.0 <= args.zeta <= 1.0:
        parser.error(f"--zeta must lie in [0, 1], got {args.zeta}")
    return run_command("istar-embed", lambda: embed(args, parser))


def embed(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Score the model on STS-B and write the report into ``--out``."""
    from ..analysis.sts_embeddings import (evaluate_sts, model_shape, open_encoder, read_sts, report_paths,
                                           scored_source, write_embedding_report)
    from ..metrics import undefined_text
    from ..posthoc import parse_transforms
    from ..reports.outputs.embedding_table import unfinished_note
    from ..storage.ownership import EMBED_MARKER, OwnedOutput

    try:
        transforms = parse_transforms(args.transforms)
    except ValueError as error:
        parser.error(f"--transforms: {error}")
    started = time.perf_counter()
    folder = OwnedOutput(args.out, EMBED_MARKER, "--out")
    writing = False
    try:
        if not args.sts.is_dir():
            raise DataError(f"--sts {args.sts}: no such folder")
        sts = _named("--sts", args.sts, lambda: read_sts(args.sts, args.split))
        fit = _fit_sentences(args.fit, args.sts, args.fit_max)
        scored = scored_source(args.model)
        unfinished = unfinished_note(scored)
        with folder:  # refused unless new, empty or an earlier istar-embed's; locked until the report is written
            width, count = model_shape(args.model)
            layers = list(range(count + 1)) if args.layer is None else args.layer
            if not -count - 1 <= layers[0] <= count:
                raise ConfigError(f"--layer {layers[0]}: the model has hidden states 0 (embeddings) to {count}; "
                                  "-1 is the last")
            for transform in transforms:
                try:
                    transform.out_dim(width)
                except ValueError as error:
                    raise ConfigError(f"--transforms: {one_line(error)}") from None
            shown = f"{layers[0]}..{layers[-1]}" if len(layers) > 1 else str(layers[0])
            print(f"istar-embed: {len(sts)} {args.split} pairs from {sts.source}; transforms fitted on {len(fit)} "
                  f"{args.fit} sentences; {args.pooling} pooling, layer(s) {shown}", file=sys.stderr,
                  flush=True)
            if scored["run_dir"] is not None:
                print(f"istar-embed: scoring the finished run {scored['run_dir']} at step {scored['step']} "
                      f"({scored['weights']})", file=sys.stderr, flush=True)
            elif unfinished:
                print(f"istar-embed: scoring {args.model}: {unfinished}", file=sys.stderr, flush=True)
            encoder = open_encoder(args.model, args.max_length)
            results, fitted = evaluate_sts(encoder, sts, fit, transforms, args.pooling, layers, args.zeta,
                                           args.batch_size)
            summary = {"model": args.model, "scored": scored, "split": args.split, "sts": sts.source,
                       "pairs": len(sts), "pooling": args.pooling,
                       "fit": {"on": args.fit, "sentences": len(fit), "sampled_to": args.fit_max}, "zeta": args.zeta,
                       "max_length": args.max_length,
                       "positive_pairs": f"gold score >= 4 ({sum(score >= 4 for score in sts.scores)} pairs)"}
            writing = True
            folder.replace(report_paths(args.out, fitted))
            write_embedding_report(args.out, summary, results, fitted)
            folder.finish(model=args.model)
    except KeyboardInterrupt:
        print(f"istar-embed: interrupted; --out {args.out} " + (
            "is incomplete (no embeddings.json): run the command again to replace it" if writing else
            "was left as it was"), file=sys.stderr)
        return 130
    for name, measures in results[max(results)].items():
        print(f"  layer {max(results)} {name:<14} Spearman {undefined_text(measures, 'spearman', '6.2f')}  "
              f"IsoScore {undefined_text(measures, 'isoscore', '.4f')}")
    scored_text = (f" ({unfinished})" if unfinished else "" if scored["run_dir"] is None
                   else f" (finished run, step {scored['step']}, {scored['weights']})")
    print(f"wrote {args.out / 'embeddings.json'}{scored_text} in {time.perf_counter() - started:.0f} s")
    return 0


def _named(option: str, value: str | Path, read: Callable[[], Any]) -> Any:
    """``read()``; its failure one line naming ``option`` and ``value``."""
    try:
        return read()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        raise ConfigError(f"{option} {value}: no such file") from None
    except UnicodeDecodeError as error:
        raise DataError(f"{option} {value}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    except OSError as error:
        raise DataError(f"{option} {value}: cannot be read ({(error.strerror or str(error)).lower()})") from None
    except RunError as error:
        message = one_line(error)
        raise type(error)(message if message.startswith(f"{option} ") else f"{option} {value}: {message}") from None
    except ValueError as error:
        message = one_line(error).removeprefix(f"{value}: ")
        raise DataError(f"{option} {value}: {message}") from None


def _fit_sentences(fit: str, sts_dir: Path, maximum: Optional[int]) -> list:
    """The fit set's sentences, each once, in first-seen order; at most ``maximum`` of them, a seeded sample."""
    from ..analysis.sts_embeddings import read_corpus, read_sts

    sentences = list(dict.fromkeys(read_sts(sts_dir, fit).sentences if fit in SPLITS else
                                   _named("--fit", fit, lambda: read_corpus(fit))))
    if maximum is None or len(sentences) <= maximum:
        return sentences
    return [sentences[i] for i in sorted(random.Random(0).sample(range(len(sentences)), maximum))]


if __name__ == "__main__":
    sys.exit(main())
