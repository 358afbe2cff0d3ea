"""Language modelling (``recipe=lm``): the texts it reads, the next-token loss against Hugging Face's own, held-out
perplexity through the trainer (with LoRA, I-STAR and early stopping), lower-is-better in the reports, and texts too
short to predict a token (refused when a split holds only those, dropped with one warning among others)."""
import json
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from transformers import AutoModelForCausalLM, AutoTokenizer

from istar_plugin.cli.analyze import main as analyze
from istar_plugin.cli.run import main as istar_run
from istar_plugin.config import compose, data_config
from istar_plugin.criterions import next_token_nll, task_loss
from istar_plugin.data import DataConfig, DataError
from istar_plugin.data.language_modeling import LanguageModeling
from istar_plugin.data.tasks import get_task
from istar_plugin.errors import ConfigError
from istar_plugin.metrics import better_sign, compute, perplexity
from istar_plugin.models.packing import Packing
from istar_plugin.reports.records.cells import Record
from istar_plugin.reports.records.settings import best_settings
from istar_plugin.reports.comparisons.paired import paired_difference
from istar_plugin.training.early_stopping import EarlyStopping
from istar_plugin.training.trainer import Trainer
from helpers import tiny_run_arguments
from tolerances import assert_same_computation, cross_entropy_rounding


def lm_task(tmp_path, **settings):
    return LanguageModeling(DataConfig(dir=str(tmp_path), **settings))


def test_texts_come_from_txt_and_jsonl_files_blank_ones_skipped(tmp_path):
    (tmp_path / "train.txt").write_text("first text\n\n  \nsecond text\n")
    (tmp_path / "eval.jsonl").write_text('{"text": "held out"}\n{"text": ""}\n{"text": "another", "id": 3}\n')
    task = lm_task(tmp_path, train_file="train.txt", eval_file="eval.jsonl", max_train_samples=1)
    assert task.load("train") == [{"text": "first text"}]
    assert task.load("eval") == [{"text": "held out"}, {"text": "another"}]
    assert task.kind == "language_modeling" and task.main_metric == "perplexity"
    assert task.metric_names == ("perplexity", "nll_per_token")


def test_texts_of_a_task_are_both_sides_of_its_pairs(shared_data):
    task = LanguageModeling(DataConfig(dir=str(shared_data / "rte"), text_from="rte", max_train_samples=4))
    texts = [example["text"] for example in task.load("train")]
    pairs = get_task("rte", DataConfig(dir=str(shared_data / "rte"), max_train_samples=2)).load("train")
    assert texts == [pairs[0]["text"], pairs[0]["text_pair"], pairs[1]["text"], pairs[1]["text_pair"]]
    assert (task.source_of("eval").startswith("the texts of rte: ")
            and task.source_of("eval").endswith("validation.parquet"))


def test_hub_texts_come_from_the_named_data_set_and_its_config(tmp_path):
    asked = []

    def loader(name, config, split):
        asked.append((name, config, split))
        return [{"text": " = Heading = \n"}, {"text": ""}, {"text": "A sentence ."}]

    task = LanguageModeling(DataConfig(source="hub", hub_dataset="Salesforce/wikitext:wikitext-2-raw-v1"),
                            hub_loader=loader)
    assert [example["text"] for example in task.load("eval")] == ["= Heading =", "A sentence ."]
    assert asked == [("Salesforce/wikitext", "wikitext-2-raw-v1", "validation")]


@pytest.mark.parametrize("settings, message", [
    ({"train_file": "train.csv", "eval_file": "train.csv"}, "lm reads .txt or .jsonl files, not .csv"),
    ({"train_file": "train.txt"}, "name the eval texts with data.eval_file"),
    ({"text_from": "squad"}, "data.text_from=squad: its kind is extractive_qa"),
    ({"text_from": "lm"}, "names this task itself"),
    ({"text_from": "no_such_task"}, "unknown task 'no_such_task'; registered tasks: cola, lm,"),
])
def test_bad_text_settings_fail_in_one_line_naming_the_value(tmp_path, settings, message):
    (tmp_path / "train.csv").write_text("text\nsome\n")
    (tmp_path / "train.txt").write_text("some\n")
    with pytest.raises((ConfigError, DataError)) as error:
        task = lm_task(tmp_path, **settings)
        task.load("train"), task.load("eval")
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_jsonl_record_without_text_is_named_with_its_line(tmp_path):
    (tmp_path / "t.jsonl").write_text('{"text": "fine"}\n{"sentence": "wrong field"}\n')
    with pytest.raises(DataError, match=r"t\.jsonl, line 2: no text field; found sentence"):
        lm_task(tmp_path, train_file="t.jsonl", eval_file="t.jsonl").load("train")


def test_an_encoder_is_refused_for_language_modelling_before_it_loads(shared_data):
    with pytest.raises(ConfigError,
                       match="task lm \\(language modelling\\) needs a decoder; model .* is a bert encoder"):
        compose(["recipe=lm", "model=minilm", "data.text_from=sst2", f"data.dir={shared_data / 'sst2'}"])


def test_next_token_loss_equals_hugging_faces_and_ignores_padding(tiny_llama):
    """Each text's loss among right-padded others is the one Hugging Face computes for it alone. The padded batch
    and the text alone run in other shapes, so their fp32 logits differ by rounding: their float64 twins must agree
    to float64 rounding and the fp32 ones within what rounding gives (tests/tolerances.py); each loss is an fp32
    cross-entropy of such logits, within :func:`cross_entropy_rounding` of the float64 one."""
    model = AutoModelForCausalLM.from_pretrained(tiny_llama).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    tokenizer.pad_token = tokenizer.eos_token
    texts = ["a gripping , beautiful film", "dull", "far too long and far too dull for anyone"]
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    alone = [tokenizer(text, return_tensors="pt")["input_ids"] for text in texts]
    forwards = {}
    with torch.no_grad():
        for dtype in (torch.float64, torch.float32):
            model.to(dtype)
            forwards[dtype] = (model(**batch).logits, [model(input_ids=ids).logits[0] for ids in alone])
        logits = forwards[torch.float32][0]
        nll, count = next_token_nll(logits, batch["input_ids"], batch["attention_mask"])
        for row, ids in enumerate(alone):
            real = ids.shape[1]  # right padding: the text's own positions come first
            assert count[row] == real - 1
            assert_same_computation([forwards[torch.float32][0][row, :real], forwards[torch.float32][1][row]],
                                    [forwards[torch.float64][0][row, :real], forwards[torch.float64][1][row]],
                                    what=texts[row])
            exact = forwards[torch.float64][1][row]  # the text's logits, to float64 rounding
            reference = torch.nn.functional.cross_entropy(exact[:-1], ids[0, 1:]).item()
            allowed = cross_entropy_rounding(exact[:-1], ids[0, 1:])
            # each fp32 loss: an fp32 cross-entropy of fp32 logits that lie within `moved` of the exact ones, so
            # every token's NLL (log-sum-exp minus the true token's logit) within twice that besides its rounding
            for loss, fp32_logits in ((model(input_ids=ids, labels=ids).loss, forwards[torch.float32][1][row]),
                                      (nll[row] / count[row], logits[row, :real])):  # Hugging Face's; ours, padded
                moved = (fp32_logits.double() - exact).abs().max().item()
                assert abs(loss.item() - reference) <= allowed + 2 * moved, (texts[row], loss.item(), reference)
    output = type("Output", (), {"logits": logits, "attention_mask": batch["attention_mask"]})
    pooled = task_loss("language_modeling", output, dict(batch))
    torch.testing.assert_close(pooled, nll.sum() / count.sum())


@given(lengths=st.lists(st.integers(1, 12), min_size=1, max_size=6), vocabulary=st.integers(2, 50))
def test_uniform_predictions_have_the_vocabulary_size_as_perplexity(lengths, vocabulary):
    width = max(lengths)
    mask = torch.tensor([[1] * n + [0] * (width - n) for n in lengths])
    ids = torch.randint(vocabulary, mask.shape)
    nll, count = next_token_nll(torch.zeros(len(lengths), width, vocabulary), ids, mask)
    assert count.tolist() == [n - 1 for n in lengths]
    packed_nll, packed_count = next_token_nll(torch.zeros(sum(lengths), vocabulary), ids, mask, Packing.of(mask))
    torch.testing.assert_close(packed_nll, nll)  # packed: a token predicts the next one of its own sequence only
    assert packed_count.tolist() == count.tolist()
    if sum(lengths) > len(lengths):
        assert perplexity(nll.tolist(), count.tolist()) == pytest.approx(vocabulary, rel=1e-5)
    else:  # one-token texts: nothing was predicted
        assert math.isnan(perplexity(nll.tolist(), count.tolist()))


def lm_config(tiny_llama, shared_data, output_dir, *extra):
    return compose(tiny_run_arguments(
        tiny_llama, shared_data, "recipe=lm", "model=", "data.text_from=sst2", "data.max_train_samples=64",
        "data.max_eval_samples=24", "optim.lr=3e-3", "optim.warmup_ratio=0", "tensorboard=false", "log_every=1",
        "precision=fp32", f"output_dir={output_dir}", *extra))


def test_a_run_reports_held_out_perplexity_as_hugging_face_computes_it(tiny_llama, shared_data, tmp_path):
    cfg = lm_config(tiny_llama, shared_data, tmp_path / "run", "model.lora.r=0", "optim.epochs=2", "eval_batch_size=5")
    trainer = Trainer(cfg)
    results = trainer.fit()
    assert results["main_metric"] == "perplexity" and results["step"] == 16
    assert results["metrics"]["perplexity"] < 0.8 * results["initial"]["perplexity"]  # it learned
    model = trainer.model.transformer.eval()
    tokenizer = trainer.tokenizer
    total, tokens = 0.0, 0
    with torch.no_grad():
        for example in LanguageModeling(data_config(cfg)).load("eval"):
            ids = tokenizer(example["text"], truncation=True, max_length=32, return_tensors="pt")["input_ids"]
            total += model(input_ids=ids, labels=ids).loss.item() * (ids.shape[1] - 1)
            tokens += ids.shape[1] - 1
    assert results["metrics"]["perplexity"] == pytest.approx(math.exp(total / tokens), rel=1e-4)
    assert results["metrics"]["nll_per_token"] == pytest.approx(total / tokens, rel=1e-4)
    assert "collapsed" not in results and 0 < results["eval_isoscore_star"] < 1
    predictions = json.loads((tmp_path / "run" / "predictions.json").read_text())
    assert sum(predictions["references"]) == tokens  # per text: its predicted tokens beside its NLL sum


def test_lora_language_modelling_with_istar_on_a_layer_range_trains_adapters_alone(tiny_llama, shared_data, tmp_path):
    cfg = lm_config(tiny_llama, shared_data, tmp_path / "run", "model.lora.r=4", "criterion=istar", "criterion.lam=1",
                    "criterion.layers=2:3", "criterion.shrinkage_points=200", "max_steps=3")
    trainer = Trainer(cfg)
    results = trainer.fit()
    trainable = [name for name, parameter in trainer.model.named_parameters() if parameter.requires_grad]
    assert trainable and all("lora_" in name for name in trainable)  # the pretrained LM head stays frozen
    assert results["trainable_parameters"] == sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert sum("train/penalty" in record for record in records) == 3 and math.isfinite(results["metrics"]["perplexity"])
    assert (tmp_path / "run" / "model" / "adapter_config.json").is_file()


def test_lower_perplexity_is_better_in_selection_early_stopping_and_verdicts():
    assert better_sign("perplexity") == -1 and better_sign("f1") == 1
    stopper = EarlyStopping(0, "perplexity", patience=2)
    assert [stopper.observe(value, step) for step, value in enumerate([30.0, 25.0, 26.0, 24.0], 1)] == [
        True, True, False, True]
    records = [Record("lm", "smollm2", "istar", lam, 0.2, seed, "perplexity", score, score, 0.1, f"{lam}/{seed}")
               for lam, scores in ((1.0, (20.0, 21.0)), (-1.0, (30.0, 31.0)), (3.0, (25.0, 24.0))) for seed, score in
               zip((1, 2), scores)]
    (chosen, compared), = best_settings(records).values()
    assert (chosen.lam, compared) == (1.0, 3)
    method = {seed: None for seed in (1, 2, 3)}
    worse = paired_difference("lm", "perplexity", method, method,
                              scores=({1: 25.0, 2: 26.0, 3: 25.5}, {1: 20.0, 2: 20.5, 3: 20.2}))
    better = paired_difference("lm", "perplexity", method, method,
                               scores=({1: 20.0, 2: 20.5, 3: 20.2}, {1: 25.0, 2: 26.0, 3: 25.5}))
    assert (worse.verdict, better.verdict) == ("worse", "better") and worse.mean > 0 > better.mean
    assert compute("lm", [math.log(8) * 3], [3]) == {"perplexity": pytest.approx(8.0),
                                                     "nll_per_token": pytest.approx(math.log(8))}


def test_the_profile_over_a_runs_checkpoints_is_analysed_step_by_step(tiny_llama, shared_data, tmp_path, capsys):
    run = tmp_path / "run"
    results = Trainer(lm_config(tiny_llama, shared_data, run, "model.lora.r=0", "max_steps=6", "save_every=2",
                                "keep_checkpoints=3", "eval_every=2",
                                "data.sort_eval_by_length=false")).fit()  # evaluated in the analysis's batches
    assert analyze([str(run), "--checkpoints", "--out", str(tmp_path / "analysis")]) == 0
    analyses = {step: json.loads((tmp_path / "analysis" / "run" / f"step_{step}" / "analysis.json").read_text())
                for step in (2, 4, 6)}
    assert [analyses[step]["label"] for step in (2, 4, 6)] == [f"Base step {step}" for step in (2, 4, 6)]
    final = analyses[6]
    # the same batches through the same weights: the run's own numbers, exactly
    assert final["isoscore_star_per_layer"] == results["eval_isoscore_star_per_layer"]
    assert final["score"] == results["metrics"]["perplexity"] and final["results_max_abs_difference"] == 0
    assert analyses[2]["score"] > final["score"]  # perplexity at step 2, read from the run's own evaluation there
    assert analyses[2]["isoscore_star_per_layer"] != final["isoscore_star_per_layer"]
    assert "run at step 2" in capsys.readouterr().err


# ------------------------------------------------------------------------ texts that predict no token
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
