"""The typed registry: one decorator for name, class and config; duplicates rejected; helpful unknown-name errors."""
from dataclasses import dataclass

import pytest

import istar_plugin.criterions  # noqa: F401  (registers the built-in criterions)
from istar_plugin.registry import CRITERIONS, Registry


@dataclass
class WidthConfig:
    width: int = 3


def test_register_build_and_list():
    registry = Registry("shape")

    @registry.register("box", WidthConfig)
    class Box:
        def __init__(self, cfg, height):
            self.area = cfg.width * height

    assert registry.build("box", WidthConfig(width=4), 5).area == 20
    assert registry.build("box", None, 2).area == 6  # default config
    assert registry.names() == ["box"] and "box" in registry and len(registry) == 1
    assert registry.entry_point_group == "istar_plugin.shapes"


def test_duplicate_name_from_another_class_is_rejected_but_same_class_is_harmless():
    registry = Registry("shape")

    class Box:
        pass

    registry.register("box")(Box)
    registry.register("box")(Box)  # re-importing a module registers the same class again
    class Other:
        pass

    with pytest.raises(ValueError, match=r"duplicate shape name 'box': already registered by .*Box, "
                                         r"cannot register .*Other"):
        registry.register("box")(Other)


def test_unknown_name_lists_registered_ones_and_config_must_be_a_dataclass():
    with pytest.raises(KeyError, match="unknown criterion 'mse'; registered criterions: cosreg, cross_entropy, flow, "
                                       "isolayer, istar, spectrum"):
        CRITERIONS.get("mse")
    with pytest.raises(TypeError, match="is not a dataclass"):
        Registry("shape").register("box", dict)


def test_a_registry_with_no_entry_points_says_to_reinstall():
    """An install whose metadata predates the built-ins' entry points registers nothing; the error says why."""
    empty = Registry("gadget")  # no package declares the istar_plugin.gadgets group
    with pytest.raises(KeyError, match=r"unknown gadget 'x': no gadgets are registered, not even the built-in ones, .*"
                                       r"group istar_plugin.gadgets; install it again"):
        empty.get("x")


def test_a_declared_entry_loads_its_class_on_first_use_and_its_decorator_keeps_the_declaration():
    registry = Registry("shape")

    class Checks:
        needs_init_from = True

    registry.declare("ordered", "collections:OrderedDict", WidthConfig, Checks)
    entry = registry.get("ordered")
    assert entry.target == "collections:OrderedDict" and entry.compose_time is Checks
    from collections import OrderedDict

    assert entry.cls is OrderedDict
    registry.register("ordered")(OrderedDict)  # the module's own decorator, once imported
    entry = registry.get("ordered")
    assert entry.target is OrderedDict and entry.config_cls is WidthConfig and entry.compose_time is Checks
    with pytest.raises(ValueError, match=r"duplicate shape name 'ordered': already registered by collections.Ordered"):
        registry.declare("ordered", "collections:Counter")


def test_what_composing_reads_matches_the_classes_it_answers_for():
    """The adapter's outline, read from its source, names the public methods the class has; a criterion is its own
    declaration (config, checks and class in one module); an engine's stand-in checks what the engine would."""
    import inspect

    from istar_plugin.models.encoder import HFEncoder
    from istar_plugin.registry import ENGINES, MODELS, outline
    from istar_plugin.training.engine_setup import EngineSetup

    outlined = {name for name in vars(outline("istar_plugin.models.encoder:HFEncoder")) if not name.startswith("_")}
    own = {name for cls in HFEncoder.__mro__ if cls.__module__.startswith("istar_plugin") for name, value in
           vars(cls).items() if not name.startswith("_") and (inspect.isfunction(value) or isinstance(value, property))}
    assert {"word_embeddings", "insert_before_head"} <= outlined == own
    assert MODELS.get("hf_auto").cls is HFEncoder
    for name in CRITERIONS.names():
        entry = CRITERIONS.get(name)
        assert entry.compose_time is entry.cls and entry.config_cls.__module__ == entry.cls.__module__, name
    for name in ENGINES.names():
        entry = ENGINES.get(name)
        own_check = getattr(entry.cls, "check_config", None)  # the trainer refuses nothing at compose time
        assert (own_check or EngineSetup.check_config).__func__ is entry.compose_time.check_config.__func__, name


def test_an_outline_reads_the_class_and_the_package_base_classes_it_inherits_without_importing_torch():
    import subprocess
    import sys

    probe = ("import sys; from istar_plugin.registry import outline; "
             "o = outline('istar_plugin.criterions.istar:IStarCriterion'); "
             "print(o.__name__, sorted(k for k in vars(o) if not k.startswith('_')), 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert done.stdout.strip() == ("IStarCriterion ['adapt', 'check_hidden_size', 'check_setup', 'constant_penalty', "
                                   "'hooks'] False"), done.stderr
