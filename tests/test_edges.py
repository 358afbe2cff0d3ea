"""Edges of issue 37 where a run or report went on as if nothing were wrong: language modelling on texts too short to
predict a token (a NaN perplexity, a 0 loss)."""
import json
import math

import pytest

from istar_plugin.cli.run import main as istar_run
from helpers import tiny_run_arguments


# ------------------------------------------------------------------------------ texts that predict no token
def lm_run(tiny_llama, shared_data, train, evaluation, output_dir, *extra):
    """A tiny language-modelling run of the random Llama (its tokenizer adds no special token) on two .txt files."""
    return tiny_run_arguments(tiny_llama, shared_data, "recipe=lm", "model=", f"data.train_file={train}",
                              f"data.eval_file={evaluation}", "batch_size=2", "max_steps=2", "precision=fp32",
                              "tensorboard=false", f"output_dir={output_dir}", "data.max_train_samples=",
                              "data.max_eval_samples=", "data.dir=", *extra)


def test_texts_of_one_token_each_are_refused_in_one_line_before_the_model_loads(tiny_llama, shared_data, tmp_path,
                                                                                 capsys):
    (tmp_path / "one.txt").write_text("a\nb\nc\n")
    (tmp_path / "eval.txt").write_text("the film is good\n")
    assert istar_run(lm_run(tiny_llama, shared_data, tmp_path / "one.txt", tmp_path / "eval.txt",
                            tmp_path / "run")) == 3
    assert capsys.readouterr().err == (
        f"istar-run: error: lm: no text of the train split ({tmp_path / 'one.txt'}) predicts a token: each of its 3 "
        "texts is shorter than two tokens within data.max_length=32 (a text predicts its tokens after the first); "
        "give texts of two tokens or more\n")
    assert not (tmp_path / "run").exists()  # refused before the run directory (and the model) was made


def test_an_eval_split_of_one_token_texts_is_refused_too(tiny_llama, shared_data, tmp_path, capsys):
    (tmp_path / "train.txt").write_text("the film is good\n")
    (tmp_path / "one.txt").write_text("a\n")
    assert istar_run(lm_run(tiny_llama, shared_data, tmp_path / "train.txt", tmp_path / "one.txt",
                            tmp_path / "run")) == 3
    assert f"no text of the eval split ({tmp_path / 'one.txt'}) predicts a token: each of its 1 texts" in (
        capsys.readouterr().err)


def test_short_texts_among_others_are_dropped_with_one_warning_and_the_run_has_a_finite_perplexity(
        tiny_llama, shared_data, tmp_path):
    (tmp_path / "mixed.txt").write_text("a\nthe film is good\nb\nthe film is bad\nc\n")
    with pytest.warns(UserWarning) as said:
        assert istar_run(lm_run(tiny_llama, shared_data, tmp_path / "mixed.txt", tmp_path / "mixed.txt",
                                tmp_path / "run")) == 0
    assert [str(warning.message) for warning in said] == [
        "lm: dropped the texts shorter than two tokens within data.max_length=32, which predict "
        f"none: 3 of 5 of the train split ({tmp_path / 'mixed.txt'}); 3 of 5 of the eval split "
        f"({tmp_path / 'mixed.txt'})"]
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert math.isfinite(results["metrics"]["perplexity"]) and results["metrics"]["perplexity"] > 1
    assert results["data"]["train"]["examples"] == results["data"]["eval"]["examples"] == 2
    losses = [json.loads(line)["train/loss"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
              if "train/loss" in line]
    assert losses and all(loss > 0 and math.isfinite(loss) for loss in losses)

